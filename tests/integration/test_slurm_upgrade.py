"""A major Slurm upgrade on a sandbox of its own (`make test-slurm-upgrade`, outside `make test`:
about ten minutes): Debian 13's Slurm 24.11 with accounting, then Slurm 26.05 declared from a
site's repository (Debian's own 26.05.5 packages from forky, the next Debian release, with the
two libraries they need: tests/integration/files/newer_slurm_repo.py).

A two-node job submitted before the upgrade keeps running through it and shows in `sacct`
afterwards; every daemon says 26.05.5; the database dump and slurmctld's state archive are on
the controller; `kiln plan --live` listed the steps beforehand; the run record shows the
controller's steps (dump, conversion in the foreground) before any slurmd was touched, and the
nodes one batch at a time; a second provision changes nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from .own_sandbox import own_sandbox, serve_repository

pytestmark = pytest.mark.upgrade

KILN = str(Path(sys.executable).parent / "kiln")
INSTANCE = "kupg"
CTL = f"{INSTANCE}-ctl"
NODES = [f"{INSTANCE}-node01", f"{INSTANCE}-node02"]
SCRIPT = Path(__file__).parent / "files" / "newer_slurm_repo.py"
SUITE, PACKAGE_VERSION, UPSTREAM = "forky", "26.05.5-1", "26.05.5"
BACKUPS = "/var/lib/kiln/slurm-upgrade/24.11.5-to-26.05.5"


def docker(*argv: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", *argv], capture_output=True, text=True, check=check, timeout=timeout
    )


def kiln(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KILN, *args], capture_output=True, text=True, env=env, timeout=2400, check=False
    )


def write_settings(inventory: Path, change) -> None:
    path = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(path.read_text())
    change(settings)
    path.write_text("---\n" + yaml.safe_dump(settings, sort_keys=False))


@pytest.fixture(scope="module")
def cluster_on_24_11(tmp_path_factory):
    """(env, inventory): the instance with Slurm 24.11 and accounting, nodes in service."""
    with own_sandbox(INSTANCE, 2, tmp_path_factory.mktemp("kupg-home")) as (env, sandbox):
        inventory = tmp_path_factory.mktemp("kupg-inventory") / "inventory"
        shutil.copytree(sandbox, inventory)

        def accounting(settings):
            settings["kiln_slurm"] = {**(settings.get("kiln_slurm") or {}), "accounting": True,
                                      "quarantine_new_nodes": False}  # fmt: skip

        write_settings(inventory, accounting)
        first = kiln("provision", str(inventory), "--yes", env=env)
        assert first.returncode == 0, first.stderr[-4000:]
        yield env, inventory


@pytest.fixture(scope="module")
def newer_repository(cluster_on_24_11):
    """(url, fingerprint): forky's Slurm 26.05.5 in a signed flat repository on the network."""
    url, printed = serve_repository(INSTANCE, SCRIPT, SUITE, PACKAGE_VERSION)
    return url, printed[-1]


def on(container: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return docker("exec", container, *argv, check=check, timeout=120)


def test_a_job_runs_through_a_major_upgrade_done_in_slurms_order(
    cluster_on_24_11, newer_repository, tmp_path
):
    env, inventory = cluster_on_24_11
    url, fingerprint = newer_repository
    assert on(CTL, "slurmctld", "-V").stdout.split()[1].startswith("24.11.")
    job = on(CTL, "sbatch", "--parsable", "-N2", "--job-name=across-upgrade",
             "--wrap", "srun sleep 150").stdout.strip()  # fmt: skip
    deadline = time.monotonic() + 60
    while on(CTL, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(2)

    upgraded = tmp_path / "inventory"
    shutil.copytree(inventory, upgraded)

    def newer(settings):
        settings["kiln_versions"]["slurm"] = UPSTREAM
        settings["kiln_slurm"]["source"] = "repository"
        settings["kiln_slurm"]["repository"] = {
            "url": url, "key_url": f"{url}key.asc", "key_fingerprint": fingerprint,
            "packages": "debian",
        }  # fmt: skip
        settings["kiln_rollout"] = {**(settings.get("kiln_rollout") or {}), "batch_size": 1}

    write_settings(upgraded, newer)
    planned = kiln("plan", str(upgraded), "--live", "--json", env=env)
    assert planned.returncode == 0, planned.stderr[-3000:]
    steps = json.loads(planned.stdout)["slurm_upgrade"]["steps"]
    assert [(step["kind"], step["hosts"]) for step in steps] == [
        ("database-backup", [CTL]),
        ("slurmdbd", [CTL]),
        ("slurmctld-state", [CTL]),
        ("slurmctld", [CTL]),
        ("slurmd", NODES),
    ]
    run = kiln("provision", str(upgraded), "--yes", "--json", "--stages", "slurm", env=env)
    assert run.returncode == 0, run.stderr[-5000:]

    # Every daemon runs the declared release.
    for daemon in ("slurmctld", "slurmdbd"):
        assert on(CTL, daemon, "-V").stdout.split()[1] == UPSTREAM, daemon
    for node in NODES:
        assert on(node, "slurmd", "-V").stdout.split()[1] == UPSTREAM, node

    # The job kept running through the upgrade, finished, and slurmdbd recorded it.
    deadline = time.monotonic() + 300
    while on(CTL, "squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip():
        assert time.monotonic() < deadline, "the job never finished"
        time.sleep(5)
    states = on(CTL, "sacct", "-n", "-X", "-P", "-j", job, "-o", "State").stdout.split()
    assert states == ["COMPLETED"], states

    # The backups: the database dump holds the job table, the state archive is whole.
    listing = on(CTL, "ls", BACKUPS).stdout.split()
    assert listing == ["slurm_acct_db.sql.gz", "slurmctld-state.tar.gz"], listing
    dump = on(CTL, "sh", "-c", f"zcat {BACKUPS}/slurm_acct_db.sql.gz | grep -c 'CREATE TABLE'")
    assert int(dump.stdout) > 10
    on(CTL, "tar", "-tzf", f"{BACKUPS}/slurmctld-state.tar.gz")
    assert on(CTL, "test", "-e", "/var/lib/kiln/slurm-upgrade-pending", check=False).returncode

    # The order, from the run record: the controller's steps before any slurmd was touched,
    # and the nodes one batch at a time.
    record = Path(json.loads(run.stdout)["record"])
    started = [
        (event.get("task"), event.get("host"))
        for event in map(json.loads, (record / "events.jsonl").read_text().splitlines())
        if event.get("event") == "runner_on_ok" and event.get("task")
    ]
    names = [task for task, _host in started]

    def first(prefix: str) -> int:
        return next(at for at, name in enumerate(names) if name.startswith(prefix))

    assert first("Back up the accounting database") < first("Convert the accounting database")
    assert first("Convert the accounting database") < first("Start slurmctld")
    assert first("Start slurmctld") < first("Upgrade the node's Slurm packages")
    restarts = [host for task, host in started if task.startswith("Restart the upgraded slurmd")]
    assert sorted(restarts) == NODES

    # Converged: a second provision of the stage (every task: --full) changes nothing.
    again = kiln("provision", str(upgraded), "--yes", "--json", "--stages", "slurm", "--full",
                 env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout)
    changed = [
        (entry["name"], host)
        for entry in summary["stages"]
        for host, result in entry["hosts"].items()
        if result["changed"]
    ]
    assert summary["changed"] == 0, changed
