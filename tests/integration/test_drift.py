"""Drift-aware re-apply on the sandbox: a converged re-run skips every node-stage; a changed
managed file (kiln-node01), a stopped managed service (chrony on kiln-node02) and a removed
managed package (ethtool on kiln-ctl) are each found by `kiln plan --live`, repaired by the next
`kiln provision` on exactly those nodes' stage, and a final probe finds no drift. A compute node
whose Slurm was removed by hand (slurmd unheld and removed with apt) is drift of its slurm stage:
`slurmd -V` no longer says the declared version; the next provision puts it back at that version.

Packages: the sandbox has no version-pinned package (the NVIDIA and NCCL pins apply to GPU nodes
only) and the base role installs its packages with state present, which would not undo a
downgrade; so the package case removes one (dpkg --remove, a leaf package), which the role does
put back. A version change is covered by tests/unit/test_drift.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.inventory import require_valid
from kiln.sandbox import config

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
# The sandbox's names (KILN_SANDBOX=kb: kb-ctl, kb-node01, ...).
CTL, NODE1, NODE2 = config.CONTROLLER, config.node_name(1), config.node_name(2)
FILE_NODE, FILE = NODE1, "/etc/security/limits.d/90-kiln-memlock.conf"
# The sandbox does not run chrony (containers keep the host's clock): slurmd is the managed
# service, in the slurm stage.
SERVICE_NODE, SERVICE, SERVICE_STAGE = NODE2, "slurmd", "slurm"
PACKAGE_NODE, PACKAGE = CTL, "ethtool"
NODES = (CTL, NODE1, NODE2)


def kiln(*args: str, state: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KILN_HOME": str(state)}
    return subprocess.run(
        [KILN, *args], capture_output=True, text=True, env=env, timeout=1800, check=False
    )


def provision(inventory: Path, state: Path) -> tuple[dict, float, str]:
    start = time.monotonic()
    proc = kiln("provision", str(inventory), "--yes", "--json", state=state)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout), took, proc.stderr


def live(inventory: Path, state: Path) -> dict:
    proc = kiln("plan", str(inventory), "--live", "--json", state=state)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)["drift"]


def running(drift: dict) -> set[tuple[str, str, str]]:
    """(node, stage, reason) of every node-stage that would run, preflight left out."""
    return {
        (node, stage, decision["reason"])
        for stage, nodes in drift["stages"].items()
        if stage != "preflight"
        for node, decision in nodes.items()
        if decision["reason"] != "unchanged"
    }


def on(container: str, *argv: str) -> str:
    proc = subprocess.run(
        ["docker", "exec", container, *argv], capture_output=True, text=True, check=True
    )
    return proc.stdout.strip()


def test_drift_is_found_and_repaired_on_exactly_the_drifted_node_stages(
    provisioned_sandbox, tmp_path
):
    inventory, state = provisioned_sandbox.inventory, tmp_path
    # Converge with this state dir: every node then holds a record of every stage it ran.
    provision(inventory, state)
    for node in NODES:
        assert on(node, "sh", "-c", "ls /var/lib/kiln/applied/base.json"), node

    # A converged re-run skips every stage on every node, and says so.
    second, took, stderr = provision(inventory, state)
    assert "drift probe:" in stderr
    ran = {(e["name"], h) for e in second["stages"] for h in e["hosts"]}
    assert ran == set(), ran
    assert all(e["status"] == "skipped" for e in second["stages"]), second["stages"]
    assert set(second["unchanged"]["base"]) == set(NODES)
    assert second["changed"] == 0
    print(f"converged re-run: {took:.1f}s")  # the lead's measurement (docs/scale.md)
    assert running(live(inventory, state)) == set()

    # Drift: a managed file, a managed service, a managed package.
    on(FILE_NODE, "sh", "-c", f"echo '# drift' >> {FILE}")
    on(SERVICE_NODE, "systemctl", "stop", SERVICE)
    on(PACKAGE_NODE, "dpkg", "--remove", PACKAGE)

    drift = live(inventory, state)
    assert running(drift) == {
        (FILE_NODE, "base", "drifted"),
        (SERVICE_NODE, SERVICE_STAGE, "drifted"),
        (PACKAGE_NODE, "base", "drifted"),
    }
    details = {node: drift["stages"]["base"][node]["details"] for node in (FILE_NODE, PACKAGE_NODE)}
    details[SERVICE_NODE] = drift["stages"][SERVICE_STAGE][SERVICE_NODE]["details"]
    assert [(d["kind"], d["name"]) for d in details[FILE_NODE]] == [("file", FILE)]
    assert [(d["kind"], d["name"]) for d in details[SERVICE_NODE]] == [("service", SERVICE)]
    assert details[SERVICE_NODE][0]["now"]["active"] != "active"
    assert [(d["kind"], d["name"], d["now"]) for d in details[PACKAGE_NODE]] == [
        ("package", PACKAGE, None)
    ]

    # The next provision runs those stages (and preflight before them) there, nothing else.
    repair, _, _ = provision(inventory, state)
    ran = {(e["name"], h) for e in repair["stages"] for h in e["hosts"]}
    assert {stage for stage, _ in ran} <= {"preflight", "base", SERVICE_STAGE}, ran
    assert {h for stage, h in ran if stage == "base"} == {FILE_NODE, PACKAGE_NODE}
    assert {h for stage, h in ran if stage == SERVICE_STAGE} == {SERVICE_NODE}
    assert repair["failed_hosts"] == [] and repair["changed"] > 0
    assert "# drift" not in on(FILE_NODE, "cat", FILE)
    assert on(SERVICE_NODE, "systemctl", "is-active", SERVICE) == "active"
    assert on(PACKAGE_NODE, "dpkg-query", "-W", "-f", "${Status}", PACKAGE).endswith("installed")

    # And a final probe finds no drift anywhere.
    assert running(live(inventory, state)) == set()


def test_full_runs_every_stage_on_every_node(provisioned_sandbox, tmp_path):
    proc = kiln(
        "provision", str(provisioned_sandbox.inventory), "--full", "--stages", "base",
        "--yes", "--json", state=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert "drift probe:" not in proc.stderr
    assert set(summary["hosts"]) == set(NODES) and "unchanged" not in summary


def slurm_version(node: str, daemon: str = "slurmd") -> str:
    """The version `slurmd -V` prints on `node` ("24.11.5" from "slurm 24.11.5")."""
    return on(node, daemon, "-V").split()[-1]


def test_a_slurm_removed_by_hand_is_drift_and_the_next_provision_reinstalls_it(
    provisioned_sandbox, tmp_path
):
    inventory, state = provisioned_sandbox.inventory, tmp_path
    declared = require_valid(inventory).versions.slurm  # the sandbox declares its release
    provision(inventory, state)  # converge with this state dir: every node holds its records
    before = slurm_version(NODE1)
    assert before.split(".")[:2] == declared.split(".")[:2], (before, declared)
    assert running(live(inventory, state)) == set()

    # By hand, as an operator might: release kiln's hold and remove the node daemon.
    # the node image's apt-daily timers may hold dpkg's lock: wait for it, as kiln's apt does
    on(NODE1, "apt-mark", "-o", "DPkg::Lock::Timeout=300", "unhold", "slurmd")
    wait = "-o DPkg::Lock::Timeout=300"
    on(NODE1, "sh", "-c", f"DEBIAN_FRONTEND=noninteractive apt-get {wait} remove -y slurmd")
    drift = live(inventory, state)
    assert running(drift) == {(NODE1, "slurm", "drifted")}, running(drift)
    details = drift["stages"]["slurm"][NODE1]["details"]
    found = {(d["kind"], d["name"]): d for d in details}
    assert found[("version", "slurmd")] == {
        "kind": "version", "name": "slurmd", "recorded": declared, "now": None,
    }, details  # fmt: skip
    assert found[("package", "slurmd")]["now"] is None, details

    # The next provision runs the slurm stage there (and preflight before it), nothing else,
    # and slurmd says the declared version again, held again.
    repair, _, _ = provision(inventory, state)
    ran = {(e["name"], h) for e in repair["stages"] for h in e["hosts"]}
    assert ran == {("preflight", NODE1), ("slurm", NODE1)}, ran
    assert repair["failed_hosts"] == [] and repair["changed"] > 0
    assert slurm_version(NODE1) == before
    assert "slurmd" in on(NODE1, "apt-mark", "showhold").split()
    assert on(NODE1, "systemctl", "is-active", "slurmd") == "active"

    # Converged: no drift left, and a second provision changes nothing.
    assert running(live(inventory, state)) == set()
    again, _, _ = provision(inventory, state)
    assert again["changed"] == 0 and all(e["status"] == "skipped" for e in again["stages"])
