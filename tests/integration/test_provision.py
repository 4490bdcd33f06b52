"""`kiln provision` on the Docker sandbox: converge, idempotence from stats, refusals.

Needs the sandbox inventory to set, for containers: base_hosts_unsafe_writes: true (Docker
bind-mounts /etc/hosts) and base_chrony_start: false (no CAP_SYS_TIME in a container).
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

from kiln.records.lock import InventoryLock

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
STAGES = "preflight,base"


def kiln(*args: str, state: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "KILN_HOME": str(state)}
    return subprocess.run(
        [KILN, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=1800, check=False
    )


def provision_json(inventory: Path, state: Path, *extra: str) -> tuple[int, dict]:
    proc = kiln(
        "provision", str(inventory), "--stages", STAGES, "--yes", "--json", *extra, state=state
    )
    document = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, document | {"_stderr": proc.stderr}


def docker_mtime(container: str, path: str) -> str:
    proc = subprocess.run(
        ["docker", "exec", container, "stat", "-c", "%Y", path],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kiln-state")


@pytest.fixture(scope="module")
def converged(sandbox, state) -> dict:
    # --full: every stage's tasks on every node, whatever the nodes' records say (the tests
    # below are about the roles and the engine; tests/integration/test_drift.py about skipping)
    code, summary = provision_json(sandbox.inventory, state, "--full")
    assert code == 0, summary.get("_stderr")
    return summary


def test_provision_converges_every_node(converged, sandbox):
    names = {node.name for node in sandbox.nodes}
    assert set(converged["hosts"]) == names
    for host, stages in converged["hosts"].items():
        assert set(stages) == {"preflight", "base"}, host
        assert set(stages.values()) <= {"ok", "changed"}, (host, stages)
    assert converged["failed_hosts"] == [] and converged["unreachable_hosts"] == []
    assert converged["stopped"] is None
    record = Path(converged["record"])
    assert (record / "summary.json").is_file() and (record / "events.jsonl").is_file()
    facts = json.loads((record / "facts.json").read_text())
    assert set(facts) == names
    assert all(item["os"].startswith("Debian") for item in facts.values())
    for node in sandbox.nodes:
        hosts = subprocess.run(
            ["docker", "exec", node.name, "cat", "/etc/hosts"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert all(f"{other.address}\t{other.name}" in hosts for other in sandbox.nodes)


def test_second_provision_changes_nothing(converged, sandbox, state):
    # --full: the roles' idempotence, every task run again (a drift-aware run would skip them)
    code, summary = provision_json(sandbox.inventory, state, "--full")
    assert code == 0, summary.get("_stderr")
    changed = {
        (entry["name"], host): result["changed"]
        for entry in summary["stages"]
        for host, result in entry["hosts"].items()
        if result["changed"]
    }
    assert summary["changed"] == 0, changed


def test_facts_prints_the_preflight_facts(converged, sandbox, state):
    proc = kiln("facts", str(sandbox.inventory), "--json", state=state)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)["hosts"]) == {node.name for node in sandbox.nodes}


def test_bad_inventory_touches_no_container(converged, sandbox, state, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(sandbox.inventory, bad)
    group_vars = bad / "group_vars" / "all.yml"
    with group_vars.open("a") as handle:
        handle.write("kiln_gpu_cuont: 8\n")  # a typo: unknown kiln_* keys are errors
    before = {node.name: docker_mtime(node.name, "/etc/hosts") for node in sandbox.nodes}
    runs_before = sorted((state / "runs").iterdir())

    code, summary = provision_json(bad, state)

    assert code == 2, summary.get("_stderr")
    assert "kiln_gpu_cuont" in summary["_stderr"]
    assert sorted((state / "runs").iterdir()) == runs_before
    assert {node.name: docker_mtime(node.name, "/etc/hosts") for node in sandbox.nodes} == before


def test_held_lock_refuses_a_second_provision(converged, sandbox, state):
    with InventoryLock(sandbox.inventory, home=state) as held:
        proc = kiln("provision", str(sandbox.inventory), "--stages", STAGES, "--yes", state=state)
    assert proc.returncode == 3, proc.stderr
    assert f"pid {os.getpid()}" in proc.stderr
    assert held.info is None  # released on leaving the block


def _wait_for_ssh(sandbox, name: str, timeout: float = 120) -> None:
    node = next(n for n in sandbox.nodes if n.name == name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = subprocess.run(
            [
                "ssh",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                f"UserKnownHostsFile={sandbox.known_hosts}",
                "-i",
                str(sandbox.private_key),
                "-o",
                "ConnectTimeout=3",
                f"root@{node.address}",
                "true",
            ],
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            return
        time.sleep(2)
    raise AssertionError(f"{name} did not answer over SSH within {timeout} s")


def test_node_stopped_mid_run_is_unreachable_and_retry_failed_converges_it(
    converged, sandbox, state
):
    victim = sandbox.nodes[-1].name
    runs_before = set((state / "runs").iterdir())
    proc = subprocess.Popen(
        [
            KILN,
            "provision",
            str(sandbox.inventory),
            "--stages",
            STAGES,
            "--full",
            "--yes",
            "--json",
        ],  # fmt: skip
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KILN_HOME": str(state)},
    )
    try:
        # Stop the node once the run is under way (its first events are on disk).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            new = set((state / "runs").iterdir()) - runs_before
            events = [run / "events.jsonl" for run in new]
            if any(e.is_file() and e.stat().st_size > 0 for e in events):
                break
            time.sleep(0.5)
        subprocess.run(["docker", "stop", "-t", "2", victim], check=True, capture_output=True)
        stdout, stderr = proc.communicate(timeout=1800)
    finally:
        subprocess.run(["docker", "start", victim], check=True, capture_output=True)
    summary = json.loads(stdout)
    assert proc.returncode == 1, stderr[-3000:]
    assert summary["unreachable_hosts"] == [victim]
    others = [n.name for n in sandbox.nodes if n.name != victim]
    for host in others:
        assert set(summary["hosts"][host].values()) <= {"ok", "changed"}, summary["hosts"][host]

    _wait_for_ssh(sandbox, victim)
    code, retry = provision_json(sandbox.inventory, state, "--retry-failed")
    assert code == 0, retry.get("_stderr")
    assert retry["targets"] == [victim]
    assert set(retry["hosts"]) == {victim}
