"""Safe maintenance (the driver upgrade's drain, wait, resume) against the sandbox's real Slurm."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.sandbox import config

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(__file__).parent / "playbooks" / "maintenance.yml"
BIN = Path(sys.executable).parent
CTL = config.CONTROLLER
NODE1, NODE2 = config.node_name(1), config.node_name(2)


def on(container: str, *argv: str, check: bool = True) -> str:
    return subprocess.run(
        ["docker", "exec", container, *argv], capture_output=True, text=True, check=check
    ).stdout.strip()


def state(node: str) -> str:
    return on(CTL, "sinfo", "--noheader", "--Node", "--nodes", node, "--format", "%T|%E")


def maintenance(inventory: Path, node: str, timeout: int) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(ROOT / "playbooks" / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(ROOT / "playbooks" / "filter_plugins"),  # is_kiln_reason
        "ANSIBLE_FORCE_COLOR": "0",
    }
    return subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(inventory),
            str(PLAYBOOK),
            "-e",
            f"target={node}",
            "-e",
            f"maintenance_timeout={timeout}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def wait_for(predicate, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(1)


def test_a_running_job_is_waited_for_then_the_node_is_resumed(provisioned_sandbox):
    inventory = provisioned_sandbox.inventory
    on(NODE1, "rm", "-f", "/var/lib/kiln/maintenance-done")
    if "kiln: test maintenance" in state(NODE1):  # left drained by an interrupted earlier run
        on(CTL, "scontrol", "update", f"nodename={NODE1}", "state=resume")
    job = on(CTL, "sbatch", "--parsable", "-w", NODE1, "--wrap", "sleep 300")
    try:
        wait_for(lambda: on(CTL, "squeue", "-h", "-j", job, "-o", "%T") == "RUNNING")
        skipped = maintenance(inventory, NODE1, timeout=4)
        assert skipped.returncode != 0
        assert f"still runs job(s) {job} after 4 s; skipped and left drained" in skipped.stdout
        assert state(NODE1).startswith(("draining|kiln: test maintenance", "drng|kiln: test"))
        assert (
            subprocess.run(
                ["docker", "exec", NODE1, "test", "-e", "/var/lib/kiln/maintenance-done"],
                check=False,
            ).returncode
            == 1
        )  # the work never ran under the job
    finally:
        on(CTL, "scancel", job)
    wait_for(lambda: on(CTL, "squeue", "-h", "-w", NODE1) == "")
    done = maintenance(inventory, NODE1, timeout=60)
    assert done.returncode == 0, done.stdout[-3000:]
    on(NODE1, "test", "-e", "/var/lib/kiln/maintenance-done")
    wait_for(lambda: state(NODE1).startswith("idle"))


def test_a_node_an_operator_drained_is_left_drained(provisioned_sandbox):
    on(CTL, "scontrol", "update", f"nodename={NODE2}", "state=drain", "reason=operator: bad fan")
    try:
        result = maintenance(provisioned_sandbox.inventory, NODE2, timeout=30)
        assert result.returncode == 0, result.stdout[-3000:]
        assert state(NODE2) in ("drained|operator: bad fan", "drain|operator: bad fan")
    finally:
        on(CTL, "scontrol", "update", f"nodename={NODE2}", "state=resume")
