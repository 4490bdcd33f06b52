"""Integration tier: a session-scoped `sandbox` fixture that brings the local cluster up once.

Reuses running containers (`kiln sandbox up` is idempotent) and leaves them running afterwards,
so a developer's next run is fast; `kiln sandbox down` removes them. Skips with the reason when
Docker is not available.
"""

from __future__ import annotations

import json
import os
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


@pytest.fixture(scope="session")
def provisioned_sandbox(sandbox, tmp_path_factory) -> Provisioned:
    """The sandbox after one full `kiln provision` (every stage): a working Slurm cluster."""
    state = tmp_path_factory.mktemp("kiln-provisioned")
    proc = subprocess.run(
        [str(VENV_BIN / "kiln"), "provision", str(sandbox.inventory), "--yes", "--json"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )
    assert proc.returncode == 0, f"kiln provision failed:\n{proc.stderr[-4000:]}"
    return Provisioned(inventory=sandbox.inventory, state=state, summary=json.loads(proc.stdout))
