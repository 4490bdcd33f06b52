"""The monitoring stage in the sandbox (docs/monitoring.md).

A copy of the sandbox inventory turns kiln_monitoring on; `kiln plan` shows the stage for it and
not for the sandbox's own inventory; `kiln provision <copy> --stages monitoring` installs Debian's
prometheus-node-exporter on every node, enabled and running, which answers on :9100 from the
controller (where the site's Prometheus would scrape from); the targets file on the controller
lists every node once, by address, with its labels, exactly as `kiln plan --output` renders it;
the CPU-only nodes get no DCGM exporter; and a second run changes nothing (idempotent).
"""

from __future__ import annotations

import json
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
CTL = config.CONTROLLER
TARGETS = "/etc/prometheus/file_sd/kiln.json"
FETCH = (
    "import sys, urllib.request; "
    "print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
)


def on(container: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "exec", container, *argv], capture_output=True, text=True, check=check
    )


def kiln(*argv: str, state: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KILN, *argv],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )


def provision_monitoring(inventory: Path, state: Path) -> dict:
    # --full: the stage's tasks run on every node even where a reused sandbox still holds the
    # monitoring stage's record from an earlier run (the drift probe would skip it there).
    proc = kiln(
        "provision", str(inventory), "--stages", "monitoring", "--full", "--yes", "--json",
        state=state,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def test_monitoring_stage_exporters_answer_and_the_targets_file_lists_every_node(
    provisioned_sandbox, sandbox, tmp_path
):
    state = provisioned_sandbox.state
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    settings_file = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["kiln_monitoring"] = {"enabled": True, "labels": {"site": "sandbox"}}
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    nodes = sandbox.nodes  # the controller first, then the compute nodes

    # The plan shows the stage only where the inventory turns it on.
    off = json.loads(kiln("plan", str(provisioned_sandbox.inventory), "--json", state=state).stdout)
    assert "monitoring" not in [s["name"] for s in off["stages"]]
    planned = kiln(
        "plan", str(inventory), "--json", "--output", str(tmp_path / "files"), state=state
    )
    document = json.loads(planned.stdout)
    stage = next(s for s in document["stages"] if s["name"] == "monitoring")
    assert stage["host_count"] == len(nodes)

    first = provision_monitoring(inventory, state)
    entry = next(s for s in first["stages"] if s["name"] == "monitoring")
    assert sorted(entry["hosts"]) == sorted(n.name for n in nodes)
    assert all(r["status"] in ("ok", "changed") for r in entry["hosts"].values()), entry["hosts"]

    for node in nodes:
        unit = "prometheus-node-exporter"
        assert on(node.name, "systemctl", "is-enabled", unit).stdout.strip() == "enabled"
        assert on(node.name, "systemctl", "is-active", unit).stdout.strip() == "active"
        # From the controller, over the sandbox network, as a Prometheus there would scrape.
        metrics = on(CTL, "python3", "-c", FETCH, f"http://{node.address}:9100/metrics").stdout
        assert "node_exporter_build_info" in metrics, node.name
        # CPU-only nodes: no DCGM exporter.
        missing = on(node.name, "dpkg-query", "-W", "datacenter-gpu-manager-exporter", check=False)
        assert missing.returncode != 0, node.name

    targets = json.loads(on(CTL, "cat", TARGETS).stdout)
    assert [g["targets"] for g in targets] == [[f"{n.address}:9100"] for n in nodes]
    assert [g["labels"]["node"] for g in targets] == [n.name for n in nodes]
    assert {g["labels"]["exporter"] for g in targets} == {"node"}
    assert all(g["labels"]["cluster"] == "sandbox" for g in targets)
    assert all(g["labels"]["site"] == "sandbox" for g in targets)
    assert [g["labels"]["role"] for g in targets] == [n.role for n in nodes]
    rendered = (tmp_path / "files" / "prometheus-targets.json").read_text()
    assert on(CTL, "cat", TARGETS).stdout == rendered  # the plan's file, byte for byte
    mode = on(CTL, "stat", "-c", "%a %U", TARGETS).stdout.strip()
    assert mode == "644 root"

    # Idempotent: the same inventory again changes nothing on any node.
    again = provision_monitoring(inventory, state)
    assert again["changed"] == 0, [
        (s["name"], h, r) for s in again["stages"] for h, r in s["hosts"].items()
    ]
