"""Integration tier: a session-scoped `sandbox` fixture that brings the local cluster up once.

Reuses running containers (`kiln sandbox up` is idempotent) and leaves them running afterwards,
so a developer's next run is fast; `kiln sandbox down` removes them. Skips with the reason when
Docker is not available.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kiln.errors import KilnError
from kiln.sandbox import config
from kiln.sandbox.docker import require_docker

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SANDBOX_NODES = int(os.environ.get("KILN_SANDBOX_NODES", "2"))


def run_kiln(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`kiln ARGS` from this venv, its output captured; the caller reads the exit code."""
    return subprocess.run([str(VENV_BIN / "kiln"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)  # fmt: skip


def run_docker(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    """`docker ARGS`, its output captured; raises on failure unless check=False."""
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          check=check)  # fmt: skip


@dataclass(frozen=True)
class Sandbox:
    inventory: Path
    private_key: Path
    known_hosts: Path
    nodes: list[config.Node]
    up_stdout: str


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    try:
        require_docker()
    except KilnError as error:
        pytest.skip(f"Docker is not available: {error.message} ({error.hint})")
    proc = subprocess.run(
        [str(VENV_BIN / "kiln"), "sandbox", "up", "--nodes", str(SANDBOX_NODES)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"kiln sandbox up failed:\n{proc.stderr}"
    paths = config.paths()
    return Sandbox(
        inventory=paths.inventory_dir,
        private_key=paths.private_key,
        known_hosts=paths.known_hosts,
        nodes=config.nodes(SANDBOX_NODES),
        up_stdout=proc.stdout,
    )


@dataclass(frozen=True)
class Provisioned:
    inventory: Path
    state: Path
    summary: dict
    burnin: dict  # the `kiln burnin --json` document that took the nodes out of quarantine


def _kiln_json(*args: str, state: Path, timeout: float) -> dict:
    proc = subprocess.run(
        [str(VENV_BIN / "kiln"), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )
    assert proc.returncode == 0, f"kiln {args[0]} failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout)


def _undo_what_a_killed_test_left(nodes: list[config.Node]) -> None:
    """On reused containers, what a test killed mid-way (its `finally` never ran) left in
    Slurm: a node drained by hand (not with one of kiln's reasons, which burn-in judges) would
    keep every later burn-in from testing it. Resumed, and said, so a run after a killed one
    starts where a fresh one does. (A CPU limit it left is lifted by `kiln sandbox up`.)"""
    names = ",".join(node.name for node in nodes)
    shown = run_docker("exec", config.CONTROLLER, "sinfo", "--noheader", "--Node",
                       f"--nodes={names}", "--format=%N|%T|%E", check=False).stdout  # fmt: skip
    for line in shown.splitlines():
        name, state, reason = line.split("|", 2)
        if state.startswith("drain") and not reason.startswith("kiln:"):
            print(f"{name}: {state} by an earlier, killed test ({reason}): resumed")
            run_docker("exec", config.CONTROLLER, "scontrol", "update", f"nodename={name}",
                       "state=resume", check=False)  # fmt: skip


@pytest.fixture(scope="session")
def provisioned_sandbox(sandbox, tmp_path_factory) -> Provisioned:
    """The sandbox after one full `kiln provision` (every stage) and a passing quick burn-in: a
    working Slurm cluster with idle nodes. The sandbox inventory quarantines new nodes, as a real
    site does, so on fresh containers the nodes join drained and only the burn-in resumes them
    (on reused containers they are known already and burn-in passes on idle nodes). The burn-in
    runs on a copy of the inventory with an absolute GEMM floor that suits a loaded CI machine."""
    state = tmp_path_factory.mktemp("kiln-provisioned")
    summary = _kiln_json("provision", str(sandbox.inventory), "--yes", state=state, timeout=1800)
    _undo_what_a_killed_test_left(sandbox.nodes[1:])
    lenient = tmp_path_factory.mktemp("kiln-burnin-inventory") / "inventory"
    shutil.copytree(sandbox.inventory, lenient)
    with (lenient / "group_vars" / "all.yml").open("a", encoding="utf-8") as handle:
        handle.write("\nkiln_burnin:\n  gemm_tflops_floor: 0.0001\n")
    burnin = _kiln_json(
        "burnin", str(lenient), "--suite", "quick", "--seconds", "5", state=state, timeout=900
    )
    assert burnin["passed"] is True, burnin
    return Provisioned(sandbox.inventory, state, summary, burnin)


LOGIN = "kilnacct"  # a user's login, as LDAP gives every node one at a site


@pytest.fixture
def login_on_every_node(sandbox):
    """LOGIN (uid 2471) on the controller and every node for the test, removed afterwards with
    its jobs: what a user's job runs as."""
    names = [node.name for node in sandbox.nodes]  # the controller first
    for name in names:
        run_docker("exec", name, "useradd", "--create-home", "--uid", "2471", LOGIN, check=False)
    yield LOGIN
    run_docker("exec", config.CONTROLLER, "scancel", "-u", LOGIN, check=False)
    for name in names:
        run_docker("exec", name, "userdel", "--remove", LOGIN, check=False)
