"""The controller-side programs of kiln.slurmctl.cas, run by bash against stand-ins of scontrol,
sinfo and squeue that keep each node's state in files (slurm_doubles): the compare-and-set
changes only a node that still holds what was expected; the window lifts a drain only while
the jobs are pending and puts the same reason back; and the window's program finishes on its
own when the process that started it (kiln's SSH session) is killed half-way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.fleet import CommandOutcome, ExecResult, NodeResult
from kiln.inventory import require_valid
from kiln.slurmctl import cas
from kiln.slurmctl.remote import Controller
from slurm_doubles import install_doubles, node, updates

SANDBOX = Path(__file__).resolve().parents[2] / "inventories" / "sandbox"
QUARANTINE = "kiln:quarantine:20261201T100000Z-aa: new node, quarantined until burn-in passes"
OPERATOR = "kiln:operator:alice: cable reseat"

# sinfo --noheader --Node --format=%N|%T|%E: every node of the scontrol stand-in's state files.
SINFO = r"""#!PYTHON
import json, os, pathlib, sys
state = pathlib.Path(os.environ["KILN_FAKE_SLURM"])
assert sys.argv[1:] == ["--noheader", "--Node", "--format=%N|%T|%E"], sys.argv
long = {"IDLE": "idle", "IDLE+DRAIN": "drained", "ALLOCATED+DRAIN": "draining",
        "ALLOCATED": "allocated"}
for path in sorted(state.iterdir()):
    try:
        node = json.loads(path.read_text())
    except ValueError:
        continue  # calls.log, the template, the job list
    if isinstance(node, dict) and "state" in node:
        print(path.name + "|" + long[node["state"]] + "|" + (node.get("reason") or "none"))
"""
# squeue: the job ids in STATE/pending are PENDING while STATE/pending-polls counts down.
SQUEUE = r"""#!PYTHON
import os, pathlib
state = pathlib.Path(os.environ["KILN_FAKE_SLURM"])
polls = state / "pending-polls"
left = int(polls.read_text()) if polls.exists() else 0
if left > 0:
    polls.write_text(str(left - 1))
    print((state / "pending").read_text().strip())
"""


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """The stand-ins on PATH, two quarantined nodes and one in service; the window's lock file
    in tmp_path."""
    state, bin_dir = tmp_path / "slurm", tmp_path / "bin"
    install_doubles(
        state,
        bin_dir,
        {
            "n1": {"state": "IDLE+DRAIN", "reason": QUARANTINE},
            "n2": {"state": "IDLE+DRAIN", "reason": OPERATOR},
            "n3": {"state": "IDLE", "reason": ""},
        },
    )
    for name, text in (("sinfo", SINFO), ("squeue", SQUEUE)):
        (bin_dir / name).write_text(text.replace("PYTHON", sys.executable, 1))
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("KILN_FAKE_SLURM", str(state))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(cas, "_WINDOW", cas._WINDOW.replace(cas.WINDOW_LOCK, str(tmp_path / "l")))
    (state / "calls.log").touch()
    return state


def local(nodes, command, *, fanout, timeout) -> ExecResult:
    """kiln.fleet.run_command's shape, running `command` here with bash."""
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=timeout)
    result = NodeResult(
        nodes[0].name, "", CommandOutcome.OK, done.returncode, done.stdout, done.stderr
    )
    return ExecResult(command, [result], 0.0, fanout, timeout)


def controller() -> Controller:
    return Controller(require_valid(SANDBOX), runner=local)


def test_compare_and_set_changes_only_a_node_that_holds_what_was_expected(slurm):
    odd = "kiln:burnin:RUN: gemm 'quoted' $(reboot) ; x|y"
    done = cas.compare_and_set(
        controller(),
        [
            cas.Change("n1", QUARANTINE, None),  # passed: resumed
            cas.Change("n2", QUARANTINE, None),  # an operator's drain now: kept
            cas.Change("n3", None, odd),  # in service, failed: drained, the reason intact
        ],
    )
    assert [(o.node, o.result) for o in done] == [
        ("n1", "applied"),
        ("n2", "kept"),
        ("n3", "applied"),
    ]
    assert done[1].now == f"drained|{OPERATOR}"
    assert node(slurm, "n1")["state"] == "IDLE"
    assert node(slurm, "n2")["reason"] == OPERATOR
    assert node(slurm, "n3")["reason"] == odd
    assert [u[1] for u in updates(slurm)] == ["nodename=n1", "nodename=n3"]  # one per target


@pytest.mark.local  # it polls squeue once a second, as on a controller: seconds, not ms
def test_the_window_lifts_only_while_jobs_are_pending_and_puts_the_same_reason_back(slurm):
    (slurm / "pending").write_text("41\n42")
    (slurm / "pending-polls").write_text("2")
    done = cas.open_window(
        controller(), {"n1": QUARANTINE, "n2": QUARANTINE}, ["41", "42"], wait_seconds=30
    )
    assert [(o.node, o.result) for o in done] == [("n1", "restored"), ("n2", "kept")]
    assert node(slurm, "n1") == {"state": "IDLE+DRAIN", "reason": QUARANTINE}
    assert node(slurm, "n2")["reason"] == OPERATOR  # never lifted
    assert [u[1:] for u in updates(slurm)] == [
        ["nodename=n1", "state=resume"],
        ["nodename=n1", "state=drain", f"reason={QUARANTINE}"],
    ]
    assert (slurm / "pending-polls").read_text() == "0"  # it waited while they were pending


@pytest.mark.local
def test_the_window_finishes_on_the_controller_when_kiln_is_killed_in_it(slurm):
    """SIGKILL to the shell kiln's SSH session runs (as when kiln or its link dies): the
    detached program still waits for the jobs and drains the node again."""
    (slurm / "pending").write_text("41")
    (slurm / "pending-polls").write_text("3")
    script = cas.window_script({"n1": QUARANTINE}, ["41"], wait_seconds=30)
    outer = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 10
    while node(slurm, "n1")["state"] != "IDLE" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert node(slurm, "n1")["state"] == "IDLE"  # lifted: the jobs are starting
    os.killpg(outer.pid, signal.SIGKILL)  # kiln's side of it, gone
    outer.wait()
    deadline = time.monotonic() + 15
    while node(slurm, "n1")["state"] == "IDLE" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert node(slurm, "n1") == {"state": "IDLE+DRAIN", "reason": QUARANTINE}
    assert json.loads((slurm / "calls.log").read_text().splitlines()[-1])[1:2] == ["nodename=n1"]


def test_many_nodes_change_in_one_scontrol_call_per_target_and_a_refused_batch_goes_one_by_one(
    slurm,
):
    """Three nodes resumed are one call (12,500 nodes must not be 12,500 calls); a batch
    naming a node Slurm does not know is refused whole, so each node is tried alone."""
    for name in ("n4", "n5"):
        (slurm / name).write_text(json.dumps({"state": "IDLE+DRAIN", "reason": QUARANTINE}))
    done = cas.compare_and_set(
        controller(), [cas.Change(n, QUARANTINE, None) for n in ("n1", "n4", "n5")]
    )
    assert [o.result for o in done] == ["applied"] * 3
    assert [u[1] for u in updates(slurm)] == ["nodename=n1,n4,n5"]
    (slurm / "n9").write_text(json.dumps({"state": "IDLE", "reason": ""}))
    (slurm / "refuse").write_text("n9")  # scontrol refuses this one (as for a name it lost)
    done = cas.compare_and_set(
        controller(), [cas.Change(n, None, "kiln:burnin:R: gemm") for n in ("n1", "n9")]
    )
    assert [(o.node, o.result) for o in done] == [("n1", "applied"), ("n9", "failed")]
    assert [u[1] for u in updates(slurm)][1:] == ["nodename=n1,n9", "nodename=n1", "nodename=n9"]
    assert node(slurm, "n1")["reason"] == "kiln:burnin:R: gemm"
