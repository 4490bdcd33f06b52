"""Quarantine: new nodes, and nodes whose hardware changed, join drained until burn-in passes.

The sandbox inventory turns quarantine off so the demo runs jobs at once; this test turns it
on in a copy, as a real site would have it, and checks that kiln only ever resumes what kiln
drained.
"""

from __future__ import annotations

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
CTL = config.CONTROLLER
NODES = [config.node_name(1), config.node_name(2)]
MARKER = "/var/lib/kiln/slurm-joined"


def on(container: str, *argv: str) -> str:
    return subprocess.run(
        ["docker", "exec", container, *argv], capture_output=True, text=True, check=True
    ).stdout.strip()


def reasons() -> dict[str, str]:
    lines = on(CTL, "sinfo", "--noheader", "--Node", "--format", "%N|%T|%E").splitlines()
    return {n: f"{s}|{r}" for n, s, r in (line.split("|", 2) for line in lines)}


def wait_idle(nodes: list[str], seconds: float = 90) -> dict[str, str]:
    """Slurm's view once `nodes` are idle (a node just resumed or restarted may lag)."""
    deadline = time.monotonic() + seconds
    while not all((now := reasons())[n].startswith("idle|") for n in nodes):
        if time.monotonic() > deadline:
            break
        time.sleep(2)
    return now


def kiln(*args: str, state: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KILN, *args], capture_output=True, text=True, timeout=1200, check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )  # fmt: skip


def test_new_and_changed_nodes_join_drained_and_kiln_resumes_them(provisioned_sandbox, tmp_path):
    state = provisioned_sandbox.state
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    settings_file = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["kiln_slurm"]["quarantine_new_nodes"] = True
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    for node in NODES:  # as if kiln had never seen them
        on(node, "rm", "-f", MARKER)
    try:
        proc = kiln("provision", str(inventory), "--stages", "slurm", "--yes", state=state)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for node in NODES:
            state_, reason = reasons()[node].split("|", 1)
            assert state_ in ("drained", "draining"), (node, state_)
            assert reason.startswith("kiln: new node, quarantined until burn-in passes"), reason

        # A second apply changes nothing: the nodes are known now.
        again = kiln("provision", str(inventory), "--stages", "slurm", "--yes", "--json",
                     state=state)  # fmt: skip
        assert again.returncode == 0, again.stderr[-3000:]
        assert '"changed": 0' in again.stdout

        resumed = kiln("resume", str(inventory), ",".join(NODES), state=state)
        assert resumed.returncode == 0, resumed.stderr
        seen = wait_idle(NODES)
        assert all(seen[n].startswith("idle|") for n in NODES), seen

        # Different hardware on one node (what kiln recorded no longer matches): back in
        # quarantine with that reason.
        on(NODES[1], "sh", "-c", f"echo 'cpus=1 memory_gib=1 gpus=0 model=none' > {MARKER}")
        changed = kiln("provision", str(inventory), "--stages", "slurm", "--yes", state=state)
        assert changed.returncode == 0, changed.stderr[-3000:]
        assert reasons()[NODES[1]].split("|", 1)[1].startswith("kiln: hardware changed")
        assert wait_idle(NODES[:1])[NODES[0]].startswith("idle|")
    finally:
        kiln("resume", str(inventory), ",".join(NODES), state=state)
        restore = kiln("provision", str(provisioned_sandbox.inventory), "--stages", "slurm",
                       "--yes", state=state)  # fmt: skip
        assert restore.returncode == 0, restore.stderr[-3000:]
