"""Accounting on the sandbox: kiln_slurm.accounting brings up slurmdbd with MariaDB.

Switches accounting on in a copy of the sandbox inventory, checks that the cluster is registered,
that a job shows in `sacct`, that the database password stays on the controller and out of the
run record, that a second apply changes nothing, and switches it off again (the default cluster
the other tests expect).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kiln.sandbox import config

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
CONTROLLER = config.CONTROLLER
NODES = [config.node_name(1), config.node_name(2)]
PASSWORD_FILE = "/var/lib/kiln/slurmdbd-db-password"


def on(container: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "exec", container, *argv], capture_output=True, text=True, check=check
    )


def provision(inventory: Path, state: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KILN, "provision", str(inventory), "--stages", "slurm", "--yes", "--json", *extra],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )


def sacct_state(job_name: str, timeout: float = 60) -> str:
    """The accounting state of the job named `job_name` ('' when slurmdbd never saw it)."""
    deadline = time.monotonic() + timeout
    while True:
        proc = on(
            CONTROLLER,
            "sacct",
            "--allusers",
            "--allocations",
            "--noheader",
            "--parsable2",
            "--starttime=now-1days",
            f"--name={job_name}",
            "--format=State",
            check=False,
        )
        state = proc.stdout.strip()
        if state == "COMPLETED" or time.monotonic() > deadline:
            return state
        time.sleep(2)


def mode_owner(container: str, path: str) -> str:
    return on(container, "stat", "-c", "%a %U:%G", path).stdout.strip()


def is_active(service: str) -> str:
    return on(CONTROLLER, "systemctl", "is-active", service, check=False).stdout.strip()


def files_containing(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_accounting_on_records_jobs_and_keeps_the_password_private(provisioned_sandbox, tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(group_vars.read_text())
    settings["kiln_slurm"] = {**(settings.get("kiln_slurm") or {}), "accounting": True}
    group_vars.write_text(yaml.safe_dump(settings, sort_keys=False))
    cluster = settings.get("kiln_cluster_name", "kiln")
    state = tmp_path / "state"
    try:
        proc = provision(inventory, state)
        assert proc.returncode == 0, proc.stderr[-3000:]

        for service in ("mariadb", "slurmdbd", "slurmctld"):
            assert is_active(service) == "active", service
        clusters = on(
            CONTROLLER,
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "list",
            "cluster",
            "format=cluster",
        ).stdout.split()
        assert cluster in clusters

        job_name = f"kiln-acct-{os.getpid()}-{time.time_ns()}"
        ran = on(
            CONTROLLER,
            "timeout",
            "120",
            "srun",
            "-N2",
            "--ntasks-per-node=1",
            f"--job-name={job_name}",
            "hostname",
        )
        assert sorted(ran.stdout.split()) == NODES
        assert sacct_state(job_name) == "COMPLETED"

        # The password: made on the controller, root-only there, 0600 slurm:slurm in
        # slurmdbd.conf, on no compute node and nowhere in the run record or kiln's output.
        assert mode_owner(CONTROLLER, PASSWORD_FILE) == "600 root:root"
        assert mode_owner(CONTROLLER, "/etc/slurm/slurmdbd.conf") == "600 slurm:slurm"
        password = on(CONTROLLER, "cat", PASSWORD_FILE).stdout.strip()
        assert len(password) >= 32
        assert f"StoragePass={password}" in on(CONTROLLER, "cat", "/etc/slurm/slurmdbd.conf").stdout
        for node in NODES:
            assert on(node, "test", "-e", PASSWORD_FILE, check=False).returncode != 0
            assert on(node, "test", "-e", "/etc/slurm/slurmdbd.conf", check=False).returncode != 0
        run_dir = Path(json.loads(proc.stdout)["record"])
        assert run_dir.is_dir()
        assert files_containing(state, password.encode()) == []
        assert password not in proc.stdout
        assert password not in proc.stderr

        # Idempotent: a second apply (every task: --full) changes nothing, keeps the password.
        again = provision(inventory, state, "--full")
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(again.stdout)["stages"][0]["changed"] == 0
        assert on(CONTROLLER, "cat", PASSWORD_FILE).stdout.strip() == password
        assert files_containing(state, password.encode()) == []
    finally:
        restored = provision(provisioned_sandbox.inventory, state)
        assert restored.returncode == 0, restored.stderr[-3000:]

    # Accounting off again: slurmdbd stopped, slurmctld runs jobs without it.
    assert is_active("slurmdbd") != "active"
    ran = on(CONTROLLER, "timeout", "120", "srun", "-N2", "--ntasks-per-node=1", "hostname")
    assert sorted(ran.stdout.split()) == NODES
