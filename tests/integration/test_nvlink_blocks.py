"""kiln_slurm.topology block on the sandbox (#32): two NVLink domains declared (one node each, as
two NVL72 racks would be 18 trays each), slurmctld (Debian 13's 24.11) loads the topology.conf
kiln renders, `scontrol show topology` lists a block per domain and their aggregate, a job of one
node per segment runs across both, and a segment larger than a block is refused. The sandbox
goes back to its rack topology afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kiln.sandbox import config

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
CONTROLLER = config.CONTROLLER
NODES = [config.node_name(1), config.node_name(2)]


def on(container: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "exec", container, *argv], capture_output=True, text=True, check=check
    )


def provision(inventory: Path, state: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KILN, "provision", str(inventory), "--stages", "slurm", "--yes"],
        capture_output=True, text=True, timeout=1200, check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )  # fmt: skip


def test_slurm_takes_a_block_per_nvlink_domain(provisioned_sandbox, tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    (inventory / "host_vars").mkdir(exist_ok=True)
    for node, rack in zip(NODES, ("rack-a", "rack-b"), strict=True):
        (inventory / "host_vars" / f"{node}.yml").write_text(f"kiln_nvlink_domain: {rack}\n")
    settings_file = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["kiln_slurm"] = {**(settings.get("kiln_slurm") or {}), "topology": "block"}
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    state = tmp_path / "state"
    try:
        applied = provision(inventory, state)
        assert applied.returncode == 0, applied.stderr[-3000:]
        shown = on(CONTROLLER, "scontrol", "show", "topology").stdout.splitlines()
        assert shown == [
            f"BlockName=nvl-rack-a BlockIndex=0 Nodes={NODES[0]} BlockSize=1",
            f"BlockName=nvl-rack-b BlockIndex=1 Nodes={NODES[1]} BlockSize=1",
            "AggregatedBlock=nvl-rack-a,nvl-rack-b BlockIndex=2 "
            f"Nodes={config.INSTANCE}-node[01-02] BlockSize=2",
        ]
        ran = on(CONTROLLER, "timeout", "120", "srun", "-N2", "--segment=1", "hostname")
        assert sorted(ran.stdout.split()) == NODES
        refused = on(CONTROLLER, "sbatch", "-N2", "--segment=2", "--wrap", "hostname", check=False)
        assert refused.returncode != 0
        assert "Requested topology configuration is not available" in refused.stderr
    finally:
        restored = provision(provisioned_sandbox.inventory, state)
        assert restored.returncode == 0, restored.stderr[-3000:]
    assert on(CONTROLLER, "scontrol", "show", "topology").stdout.startswith("SwitchName=")
