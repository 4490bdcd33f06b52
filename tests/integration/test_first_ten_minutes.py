"""Issue 20 on the sandbox: the node image carries the CPU burn-in runtime, so the burnin stage
finds it installed (at the version the role pins) and installs nothing; new nodes joined
quarantined and the session's burn-in resumed them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from kiln.sandbox import config, image, releases

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODES = [config.node_name(1), config.node_name(2)]
TORCH_TASK = "Install the distribution's torch (CPU, gloo)"


def on(container: str, *argv: str) -> str:
    proc = subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, (argv, proc.stderr)
    return proc.stdout.strip()


def test_every_node_runs_the_image_that_carries_the_burnin_runtime(sandbox):
    tag = image.image_tag()
    for node in [config.CONTROLLER, *NODES]:
        argv = ["docker", "inspect", "--format", "{{.Config.Image}}", node]
        used = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
        assert used == tag, (node, used, "recreate the sandbox: `kiln sandbox down && up`")
    release = releases.chosen()
    pins = REPO / "playbooks/roles/burnin/vars" / f"Debian-{release.os.split('-')[1]}.yml"
    pinned = yaml.safe_load(pins.read_text())["__burnin_system_packages"][0]
    torch_version = pinned.split("=")[1].rstrip("*")  # python3-torch=2.6.0*: the role's pin
    for node in NODES:
        version = on(node, "dpkg-query", "-W", "-f", "${Version}", "python3-torch")
        assert version.startswith(torch_version), (version, pinned)
        on(node, "python3", "-c", "import torch.distributed as d; assert d.is_gloo_available()")


def test_the_burnin_stage_installs_nothing_on_the_sandbox(provisioned_sandbox):
    """The fixture's `kiln burnin` installed its runtime first (a run of the burnin stage, kept
    in the state's run records): on the image that carries torch it found it and did nothing."""
    runs = provisioned_sandbox.state / "runs"
    installs = [
        run
        for run in sorted(runs.iterdir())
        if (run / "summary.json").is_file()
        and [s["name"] for s in json.loads((run / "summary.json").read_text())["stages"]]
        == ["burnin"]
    ]
    assert installs, sorted(p.name for p in runs.iterdir())
    record = installs[0]
    events = [json.loads(line) for line in (record / "events.jsonl").read_text().splitlines()]
    torch = [e for e in events if TORCH_TASK in str(e.get("task")) and e.get("host")]
    assert sorted(e["host"] for e in torch) == NODES, torch
    assert not any(e.get("changed") for e in torch), torch  # found installed: nothing done
    assert all(e["event"] == "runner_on_ok" for e in torch), torch


def test_new_nodes_joined_quarantined_and_the_burnin_resumed_them(provisioned_sandbox):
    """On fresh containers the nodes were new: drained until the fixture's burn-in passed."""
    document = provisioned_sandbox.burnin
    assert document["passed"] is True
    for node in NODES:
        state = on(config.CONTROLLER, "sinfo", "--noheader", "--Node", "--nodes", node,
                   "--format", "%T")  # fmt: skip
        assert state.startswith("idle"), (node, state)
