"""Accounting on the sandbox: kiln_slurm.accounting brings up slurmdbd with MariaDB and keeps
the declared QoS, accounts, users and limits in it (#31).

Declares accounting in a copy of the sandbox inventory, checks that the cluster is registered,
that a job shows in `sacct`, that `sacctmgr` holds what is declared and Slurm enforces it (a
job over the account's GrpTRES pends with AssocGrpNodeLimit), that the database password stays
on the controller and out of the run record, that a second apply changes nothing, and switches
accounting off again (the default cluster the other tests expect).
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

from .conftest import LOGIN

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
CONTROLLER = config.CONTROLLER
NODES = [config.node_name(1), config.node_name(2)]
PASSWORD_FILE = "/var/lib/kiln/slurmdbd-db-password"
USER = LOGIN  # a login on every node (sites have LDAP), made before sacctmgr names it
DECLARED = {
    "qos": {"long": {"priority": 10, "max_wall": "3-00:00:00", "max_jobs_per_user": 4}},
    "accounts": {
        "research": {"fairshare": 10, "grp_tres": {"node": 1}, "description": "Research"},
        "vision": {"parent": "research", "max_wall": "12:00:00", "qos": ["long", "normal"]},
    },
    "users": {USER: {"accounts": ["vision", "research"], "fairshare": 5}},
}
# `sacctmgr show association cluster=sandbox wopl format=Account,User,ParentName,Fairshare,
# GrpTRES,MaxWall,QOS`: what DECLARED is in Slurm's own words (QOS sorted, MaxWall D-HH:MM:SS).
EXPECTED_ASSOCIATIONS = {
    "root||",  # Slurm's own, with its user root
    "research||root|10|node=1||",
    "vision||research|1||12:00:00|long,normal",
    f"research|{USER}||5|||",
    f"vision|{USER}||5|||",
}


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


def associations(cluster: str) -> set[str]:
    columns = "format=Account,User,ParentName,Fairshare,GrpTRES,MaxWall,QOS"
    shown = on(
        CONTROLLER, "sacctmgr", "--noheader", "--parsable2", "show", "association",
        f"cluster={cluster}", "wopl", columns,
    ).stdout.splitlines()  # fmt: skip
    # root's rows carry Slurm's defaults; the declared ones are compared whole
    return {"root||" if line.startswith("root|") else line for line in shown}


def pending_reason(job: str, timeout: float = 90) -> str:
    """The reason Slurm gives for the pending job once the scheduler has looked at it."""
    deadline = time.monotonic() + timeout
    while True:
        reason = on(CONTROLLER, "squeue", "-h", "-j", job, "-o", "%r").stdout.strip()
        if reason.startswith("Assoc") or time.monotonic() > deadline:
            return reason
        time.sleep(2)


def submit_as_user(account: str) -> str:
    proc = on(
        CONTROLLER, "su", "-", USER, "-c",
        f"sbatch --parsable -A {account} -N1 -o /dev/null --wrap 'sleep 300'",
    )  # fmt: skip
    return proc.stdout.strip().split(";")[0]


def test_accounting_records_jobs_enforces_the_declared_limits_and_keeps_the_password_private(
    provisioned_sandbox, tmp_path, login_on_every_node
):
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(group_vars.read_text())
    settings["kiln_slurm"] = {**(settings.get("kiln_slurm") or {}), "accounting": DECLARED}
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

        # What is declared is what sacctmgr holds, and Slurm enforces it: the account may use
        # one node at a time, so the user's second one-node job waits on the account's limit.
        assert associations(cluster) == EXPECTED_ASSOCIATIONS
        first = submit_as_user("research")
        second = submit_as_user("vision")  # vision is below research: research's limit holds
        assert pending_reason(second) == "AssocGrpNodeLimit", (first, second)
        on(CONTROLLER, "scancel", first, second)

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
