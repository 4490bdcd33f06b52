"""Day-to-day Slurm operations on the provisioned sandbox: drain/resume, status, inspect, munge.

Everything goes through real Slurm (Debian's own) in the Docker sandbox; checks read the
cluster directly with `docker exec` on the containers, never through kiln.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.sandbox import config

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
CTL = config.CONTROLLER
NODE1, NODE2 = config.node_name(1), config.node_name(2)
KEY = "/etc/munge/munge.key"


def kiln(*args: str, state: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "KILN_HOME": str(state)}
    return subprocess.run([KILN, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)  # fmt: skip


def on(container: str, *argv: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0 or not check, f"{container} {argv}: {proc.stderr}"
    return proc.stdout.strip()


def sinfo(node: str) -> tuple[str, str]:
    """(state, reason) as Slurm itself prints them."""
    state, _, reason = on(CTL, "sinfo", "-h", "-N", "-n", node, "-o", "%T|%E").partition("|")
    return state, reason


def wait_for_state(node: str, wanted: str, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while (state := sinfo(node)[0]) != wanted and time.monotonic() < deadline:
        time.sleep(1)
    return state


def key_sums() -> dict[str, str]:
    return {name: on(name, "sha256sum", KEY).split()[0] for name in (CTL, NODE1, NODE2)}


def test_drain_and_resume_round_trip(provisioned_sandbox):
    inv, state = str(provisioned_sandbox.inventory), provisioned_sandbox.state
    proc = kiln("drain", inv, NODE1, "--reason", 'fan "swap"; $(reboot)', "--json", state=state)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (change,) = doc["nodes"]
    assert change["before"]["state"] == "idle" and change["after"]["state"] == "drained"
    who = change["after"]["drained_by"]
    assert sinfo(NODE1) == ("drained", f'kiln:operator:{who}: fan "swap"; $(reboot)')
    proc = kiln("resume", inv, NODE1, state=state)
    assert proc.returncode == 0, proc.stderr
    assert wait_for_state(NODE1, "idle") == "idle"


def test_resume_refuses_a_hand_drain_and_force_resumes_it(provisioned_sandbox):
    inv, state = str(provisioned_sandbox.inventory), provisioned_sandbox.state
    on(CTL, "scontrol", "update", f"nodename={NODE2}", "state=drain", "reason=disk swap")
    proc = kiln("resume", inv, NODE2, state=state)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "refused" in proc.stdout and "disk swap" in proc.stdout and "root" in proc.stdout
    assert sinfo(NODE2) == ("drained", "disk swap")
    proc = kiln("resume", inv, NODE2, "--force", "--json", state=state)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["nodes"][0]["message"].startswith("forced: was drained by root")
    assert wait_for_state(NODE2, "idle") == "idle"


def test_status_json_lists_both_nodes_with_states(provisioned_sandbox):
    inv, state = str(provisioned_sandbox.inventory), provisioned_sandbox.state
    proc = kiln("status", inv, "--json", state=state)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    nodes = {node["name"]: node for node in doc["nodes"]}
    assert set(nodes) == {NODE1, NODE2}
    assert {node["state"] for node in nodes.values()} == {"idle"}
    assert doc["flagged"] == {} and doc["counts"] == {"idle": 2}
    # The fixture's quick burn-in (which took the new nodes out of quarantine) passed them.
    assert all(node["burnin"]["verdict"] == "passed" for node in nodes.values()), nodes


def test_inspect_cpu_node_says_no_gpus_and_shows_slurm_state(provisioned_sandbox):
    inv, state = str(provisioned_sandbox.inventory), provisioned_sandbox.state
    proc = kiln("inspect", inv, NODE1, "--json", state=state)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    rows = {row["item"]: row for row in doc["rows"]}
    assert doc["gpu_tools"] is False and doc["pci_gpus"] == []
    assert "no GPU tools" in rows["GPUs"]["shown"] and rows["GPUs"]["match"] is True
    assert rows["slurm state"]["shown"] == "idle" and doc["slurm"]["state"] == "idle"
    table = kiln("inspect", inv, NODE1, state=state)
    assert table.returncode == 0 and "no GPU tools" in table.stdout


def test_rotate_munge_key_changes_every_key_and_jobs_still_run(provisioned_sandbox):
    inv, state = str(provisioned_sandbox.inventory), provisioned_sandbox.state
    before = key_sums()
    assert len(set(before.values())) == 1
    proc = kiln("slurm", "rotate-munge-key", inv, "--yes", state=state, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    after = key_sums()
    assert len(set(after.values())) == 1, after
    assert all(after[name] != before[name] for name in after), (before, after)
    assert wait_for_state(NODE1, "idle") == "idle" and wait_for_state(NODE2, "idle") == "idle"
    names = on(CTL, "srun", "-N2", "hostname").split()
    assert sorted(names) == [NODE1, NODE2]


def test_corrupted_munge_key_is_caught_by_name_and_repaired(provisioned_sandbox):
    inv, state = str(provisioned_sandbox.inventory), provisioned_sandbox.state
    good = key_sums()[CTL]
    on(NODE2, "sh", "-c", f"head -c 1024 /dev/urandom > {KEY} && chown munge:munge {KEY} && "
       f"chmod 0400 {KEY} && systemctl restart munge")  # fmt: skip
    proc = kiln("provision", inv, "--stages", "slurm", "--check", "--yes", state=state, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-4000:]
    assert NODE2 in output and "does not decode on" in output and "munge key differs" in output
    assert key_sums()[NODE2] != good  # check mode changed nothing
    proc = kiln("provision", inv, "--stages", "slurm", "--yes", state=state, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert set(key_sums().values()) == {good}
    assert sorted(on(CTL, "srun", "-N2", "hostname").split()) == [NODE1, NODE2]
