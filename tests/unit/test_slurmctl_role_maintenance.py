"""The slurm_maintenance role's decisions, through real ansible-playbook over local hosts.

The controller's `scontrol` and `squeue` are stand-ins (tests/slurm_doubles.py) on PATH that
keep each node's state and reason in a file and answer the way Slurm 22.05 does: `scontrol
show node` replays the recorded real block of tests/fixtures/real/slurm-sinfo-scontrol (its
name, State= and Reason= lines set per node), "Node X not found" on stdout with exit 1 for a
name Slurm does not know, and Slurm's error texts on stderr with exit 1 when the controller
cannot be reached.
What each node goes through (drain, the disruptive work, resume) is read back from the
stand-in's call log and from a marker the work writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_doubles import SCONTROL, SCONTROL_SHOW, TIMED_OUT, UNREACHABLE, role_playbook

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
RUN_ID = "20261130T101500Z-3f9a1c"
OURS = f"kiln:maintenance:{RUN_ID}: maintenance"
BURNIN = "kiln:burnin:20261129T080000Z-aa11bb: gemm cpu0 0.0004 TFLOPS < floor 0.001"
OPERATOR = "kiln:operator:alice: disk swap"

PLAY = [
    {
        "name": "A disruptive change, as nvidia_driver makes one",
        "hosts": "kiln_compute",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Drain and wait for jobs",
                "ansible.builtin.include_role": {"name": "slurm_maintenance",
                                                 "tasks_from": "drain"},
                "vars": {"slurm_maintenance_timeout_s": 5, "slurm_maintenance_poll_s": 1},
            },
            {
                "name": "The disruptive work",
                "ansible.builtin.copy": {"dest": "{{ work_dir }}/{{ inventory_hostname }}",
                                         "content": "done\n", "mode": "0644"},
            },
            {
                "name": "An operator drains n07 while the work runs",
                "ansible.builtin.command": {"argv": ["scontrol", "update", "nodename=n07",
                                                     "state=drain", f"reason={OPERATOR}"]},
                "when": "inventory_hostname == 'n07'",
            },
            {
                "name": "Resume",
                "ansible.builtin.include_role": {"name": "slurm_maintenance",
                                                 "tasks_from": "resume"},
            },
        ],
    }
]  # fmt: skip

NODES = {
    "n01": {"state": "IDLE"},  # idle: drained, worked on, resumed
    "n02": {"state": "IDLE+DRAIN", "reason": BURNIN},  # failed a burn-in: left alone
    "n03": {"state": "IDLE+DRAIN", "reason": OPERATOR},  # an operator's drain: left alone
    "n04": {"state": "IDLE+DRAIN", "reason": "memory issues?"},  # the recorded real drain
    "n05": None,  # not in Slurm: "Node n05 not found"
    "n06": {"state": "IDLE", "error": TIMED_OUT},  # Slurm cannot answer about it
    "n07": {"state": "IDLE"},  # drained by this run, then drained again by an operator
    "n08": {"state": "DOWN*", "reason": "Not responding"},  # down: left alone
}


def setup(tmp_path: Path) -> tuple[list[str], dict]:
    if not (Path(sys.executable).parent / "ansible-playbook").exists():
        pytest.skip("ansible-playbook is not installed beside python")
    state, bin_dir, work = tmp_path / "slurm", tmp_path / "bin", tmp_path / "work"
    for folder in (state, bin_dir, work):
        folder.mkdir()
    blocks = SCONTROL_SHOW.read_text().split("\n\n")
    (state / "template").write_text(next(b for b in blocks if b.startswith("NodeName=cricket ")))
    for name, node in NODES.items():
        if node is not None:
            (state / name).write_text(json.dumps(node))
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(SCONTROL.replace("PYTHON", sys.executable, 1))
    squeue = bin_dir / "squeue"  # no job runs on any node
    squeue.write_text("#!/bin/sh\nexit 0\n")
    for tool in (scontrol, squeue):
        tool.chmod(0o755)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "vars": {**local, "work_dir": str(work)},
            "children": {
                "kiln_controllers": {"hosts": {"ctl": None}},
                "kiln_compute": {"hosts": dict.fromkeys(NODES)},
            },
        }
    }
    return role_playbook(tmp_path, inventory, PLAY, state=state, bin_dir=bin_dir, run_id=RUN_ID)


def run(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


def updates(tmp_path: Path) -> list[list[str]]:
    calls = (tmp_path / "slurm" / "calls.log").read_text().splitlines()
    return [args for args in map(json.loads, calls) if args[0] == "update"]


def node(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / "slurm" / name).read_text())


def worked_on(tmp_path: Path) -> list[str]:
    return sorted(path.name for path in (tmp_path / "work").iterdir())


def test_the_role_drains_and_resumes_only_what_it_drained(tmp_path):
    argv, env = setup(tmp_path)
    done = run(argv, env)
    out = done.stdout
    assert done.returncode == 2, out[-4000:]  # n06 failed

    # Only n01 and n07 were drained, with this run's reason; only n01 was resumed.
    assert sorted(map(tuple, updates(tmp_path))) == [
        ("update", "nodename=n01", "state=drain", f"reason={OURS}"),
        ("update", "nodename=n01", "state=resume"),
        ("update", "nodename=n07", "state=drain", f"reason={OURS}"),
        ("update", "nodename=n07", "state=drain", f"reason={OPERATOR}"),  # the operator
    ]
    assert node(tmp_path, "n01") == {"state": "IDLE", "reason": ""}
    # A node drained by a failed burn-in keeps its reason and is not resumed; so does every
    # other drain, down node and the drain an operator placed during the work.
    assert node(tmp_path, "n02") == NODES["n02"]
    assert node(tmp_path, "n03") == NODES["n03"]
    assert node(tmp_path, "n04") == NODES["n04"]
    assert node(tmp_path, "n08") == NODES["n08"]
    assert node(tmp_path, "n07") == {"state": "IDLE+DRAIN", "reason": OPERATOR}
    # The work ran on every node but n06, whose state Slurm could not give.
    assert worked_on(tmp_path) == ["n01", "n02", "n03", "n04", "n05", "n07", "n08"]
    assert (
        "cannot read n06's state from Slurm on ctl, so it is neither drained nor changed: "
        f"{TIMED_OUT}"
    ) in out
    # The role says which nodes it left alone, with their reasons.
    assert f"n02 left alone: already IDLE+DRAIN ({BURNIN}); this run keeps that reason" in out
    assert f"n03 left alone: already IDLE+DRAIN ({OPERATOR})" in out
    assert "n04 left alone: already IDLE+DRAIN (memory issues?)" in out
    assert "n08 left alone: already DOWN* (Not responding)" in out
    assert f"n07 not resumed: its drain was changed during the work to {OPERATOR}" in out
    assert f"n02 not resumed: it was already IDLE+DRAIN ({BURNIN}) before this run" in out


def test_with_slurmctld_down_no_node_is_touched(tmp_path):
    argv, env = setup(tmp_path)
    (tmp_path / "slurm" / "down").touch()
    done = run(argv, env)
    out = done.stdout
    assert done.returncode == 2, out[-4000:]
    assert updates(tmp_path) == []  # nothing drained
    assert worked_on(tmp_path) == []  # the disruptive step ran nowhere
    assert "slurmctld does not answer on ctl, so n01 is neither drained nor changed: " in out
    assert "Slurmctld(primary) at ctl is DOWN" in out
    for name in NODES:  # every node fails at the first check, before its drain
        assert f"slurmctld does not answer on ctl, so {name} is neither drained" in out


def test_a_controller_that_cannot_be_contacted_fails_the_node_before_the_work(tmp_path):
    """scontrol ping answered, then `scontrol show node` could not reach slurmctld: Slurm's
    words, and the node is not treated as "not in Slurm"."""
    argv, env = setup(tmp_path)
    (tmp_path / "slurm" / "n01").write_text(json.dumps({"state": "IDLE", "error": UNREACHABLE}))
    done = run([*argv, "--limit", "n01,ctl"], env)
    assert done.returncode == 2, done.stdout[-4000:]
    assert f"so it is neither drained nor changed: {UNREACHABLE}" in done.stdout
    assert updates(tmp_path) == [] and worked_on(tmp_path) == []
