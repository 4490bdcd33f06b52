"""The Slurm stage on the sandbox: a real cluster that runs jobs, configured by kiln alone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
CONTROLLER = "kiln-ctl"
NODES = ["kiln-node01", "kiln-node02"]


def on(container: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "exec", container, *argv], capture_output=True, text=True, check=check
    )


def wait_for_states(expected: set[str], timeout: float = 90) -> dict[str, str]:
    """Node -> Slurm state, once every compute node is in one of `expected` (or timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = on(CONTROLLER, "sinfo", "--noheader", "--Node", "--format", "%N %T").stdout
        states = dict(line.split() for line in lines.splitlines() if line.strip())
        if all(states.get(node) in expected for node in NODES) or time.monotonic() > deadline:
            return states
        time.sleep(2)


def provision(inventory: Path, state: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KILN, "provision", str(inventory), "--stages", "slurm", "--yes", *extra],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )


def test_compute_nodes_register_idle(provisioned_sandbox):
    states = wait_for_states({"idle"})
    assert {node: states.get(node) for node in NODES} == dict.fromkeys(NODES, "idle")


def test_every_node_runs_the_declared_slurm_held(provisioned_sandbox):
    """Declared means installed: the sandbox's release declares its distribution's Slurm (24.11
    on Debian 13, 22.05 on Debian 12); each daemon says that version and apt holds it."""
    settings = yaml.safe_load((provisioned_sandbox.inventory / "group_vars" / "all.yml").open())
    declared = settings["kiln_versions"]["slurm"]
    for name, daemon in [(CONTROLLER, "slurmctld"), *((node, "slurmd") for node in NODES)]:
        said = on(name, daemon, "-V").stdout.split()
        assert said[0] in ("slurm", "slurm-wlm"), (name, said)
        assert said[1].startswith(f"{declared}."), (name, said)
        assert daemon in on(name, "apt-mark", "showhold").stdout.split(), name


def test_a_two_node_job_runs(provisioned_sandbox):
    wait_for_states({"idle"})
    proc = on(CONTROLLER, "timeout", "120", "srun", "-N2", "--ntasks-per-node=1", "hostname")
    assert sorted(proc.stdout.split()) == NODES


def test_every_node_has_the_identical_slurm_conf(provisioned_sandbox):
    sums = {
        name: on(name, "sha256sum", "/etc/slurm/slurm.conf").stdout.split()[0]
        for name in [CONTROLLER, *NODES]
    }
    assert len(set(sums.values())) == 1, sums


def test_munge_key_is_private_and_shared(provisioned_sandbox):
    for name in [CONTROLLER, *NODES]:
        assert on(name, "stat", "-c", "%a %U:%G", "/etc/munge/munge.key").stdout.strip() == (
            "400 munge:munge"
        )
    credential = on(CONTROLLER, "munge", "--no-input").stdout
    for name in NODES:
        decoded = subprocess.run(
            ["docker", "exec", "-i", name, "unmunge"],
            input=credential,
            capture_output=True,
            text=True,
            check=False,
        )
        assert decoded.returncode == 0, decoded.stderr


def test_partition_change_reconfigures_without_losing_a_running_job(provisioned_sandbox, tmp_path):
    wait_for_states({"idle"})
    job = on(CONTROLLER, "sbatch", "--parsable", "-N1", "--wrap", "sleep 300").stdout.strip()
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(group_vars.read_text())
    settings["kiln_partitions"] = [
        {"name": "batch", "groups": ["kiln_compute"], "default": True},
        {"name": "short", "nodes": ["kiln-node02"], "max_time": "01:00:00"},
    ]
    group_vars.write_text(yaml.safe_dump(settings, sort_keys=False))
    # The unit's invocation: a restart makes a new one, a reconfigure keeps it (Slurm 23.11+
    # re-executes slurmctld on a reconfigure, so its pid changes even then)
    invocation = on(CONTROLLER, "systemctl", "show", "-p", "InvocationID", "slurmctld").stdout
    try:
        proc = provision(inventory, provisioned_sandbox.state)
        assert proc.returncode == 0, proc.stderr[-3000:]
        partitions = on(CONTROLLER, "sinfo", "--noheader", "--format", "%P %N").stdout
        assert "short kiln-node02" in partitions
        # A reconfigure, not a restart: the unit kept its invocation and the job kept running.
        assert on(CONTROLLER, "systemctl", "show", "-p", "InvocationID", "slurmctld").stdout == (
            invocation
        )
        assert on(CONTROLLER, "squeue", "--noheader", "-j", job, "-o", "%T").stdout.strip() == (
            "RUNNING"
        )
    finally:
        on(CONTROLLER, "scancel", job, check=False)
        restored = provision(provisioned_sandbox.inventory, provisioned_sandbox.state)
        assert restored.returncode == 0, restored.stderr[-3000:]
    assert "short" not in on(CONTROLLER, "sinfo", "--noheader", "--format", "%P").stdout


def test_a_killed_run_still_restarts_on_the_next_apply(provisioned_sandbox):
    """The state a run killed between installing slurm.conf and restarting leaves behind.

    The file is already the new one (so nothing changes on the next apply) but the restart
    it needed is still recorded on the node: the next apply must do it.
    """
    on(
        NODES[0],
        "sh",
        "-c",
        "echo 'slurm.conf changed; restart pending' > /var/lib/kiln/slurm-restart-pending",
    )
    before = on(NODES[0], "systemctl", "show", "-p", "MainPID", "slurmd").stdout
    proc = provision(provisioned_sandbox.inventory, provisioned_sandbox.state)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert on(NODES[0], "systemctl", "show", "-p", "MainPID", "slurmd").stdout != before
    assert on(NODES[0], "test", "-e", "/var/lib/kiln/slurm-restart-pending", check=False).returncode
    assert wait_for_states({"idle"})[NODES[0]] == "idle"
