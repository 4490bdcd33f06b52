"""The node health check in the sandbox's real Slurm (docs/health.md).

A copy of the sandbox inventory turns kiln_health on with a 10 s interval (time_sync skipped: a
container's clock is the host's, and timedatectl has nothing to say about it) and runs the slurm
stage. Then: slurm.conf names the program (scontrol show config); a fault injected on ONE node
(its expectations, /etc/kiln/health.json as the role wrote it, expect a mount it lacks) drains
it within an interval or two with the probe named, the other node stays in service; clearing the
fault leaves it drained while auto_resume is off and resumes it once auto_resume is on; a node
an operator drained is never resumed by the check. The original configuration is restored
(the slurm stage again with the sandbox's own inventory) whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kiln.parsers.drain_reason import parse_reason
from kiln.sandbox import config

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
CTL = config.CONTROLLER
FAULTY, OTHER = config.node_name(1), config.node_name(2)
EXPECT = "/etc/kiln/health.json"
INTERVAL = 10
MOUNT = "/kiln-health-fault"
OPERATOR = "kiln:operator:alice: disk swap"


def on(container: str, *argv: str, check: bool = True) -> str:
    return subprocess.run(
        ["docker", "exec", container, *argv], capture_output=True, text=True, check=check
    ).stdout.strip()


def reasons() -> dict[str, tuple[str, str]]:
    lines = on(CTL, "sinfo", "--noheader", "--Node", "--format", "%N|%T|%E").splitlines()
    return {n: (s, r) for n, s, r in (line.split("|", 2) for line in lines)}


def setting(shown: str, name: str) -> str | None:
    """A value of `scontrol show config` ("Name   = value"; Slurm 23.11+ numbers the entries of
    a list setting: "Prolog[0]   = value", the first one taken)."""
    match = re.search(rf"^{name}(?:\[0\])?\s*=\s*(.*?)\s*$", shown, re.MULTILINE)
    return match[1] if match else None


def wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate(reasons()):
            return True
        time.sleep(2)
    return predicate(reasons())


def edit_expectations(node: str, **changes) -> None:
    """Change the expectations the role wrote on `node` (the probes read them on every run)."""
    expect = json.loads(on(node, "cat", EXPECT))
    for key, value in changes.items():
        if key == "mounts":
            expect["node"]["mounts"] = value
        else:
            expect[key] = value
    subprocess.run(["docker", "exec", "-i", node, "sh", "-c", f"cat > {EXPECT}"],
                   input=json.dumps(expect), text=True, check=True)  # fmt: skip


def provision_slurm(inventory: Path, state: Path) -> None:
    proc = subprocess.run(
        [KILN, "provision", str(inventory), "--stages", "slurm", "--yes"],
        capture_output=True, text=True, timeout=1800, check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_a_failing_check_drains_its_node_and_resumes_only_its_own_drain(
    provisioned_sandbox, tmp_path
):
    state = provisioned_sandbox.state
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    settings_file = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["kiln_health"] = {"enabled": True, "interval": INTERVAL, "skip": ["time_sync"]}
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    try:
        provision_slurm(inventory, state)
        shown = on(CTL, "scontrol", "show", "config")
        assert setting(shown, "HealthCheckProgram") == "/usr/local/sbin/kiln-health"
        assert setting(shown, "HealthCheckInterval") == f"{INTERVAL} sec"
        assert setting(shown, "HealthCheckNodeState") == "ANY"
        assert setting(shown, "Prolog") == "/usr/local/sbin/kiln-health-prolog"
        expect = json.loads(on(FAULTY, "cat", EXPECT))
        assert expect["node"]["name"] == FAULTY and expect["gpu"] is None  # CPU node
        assert expect["auto_resume"] is False
        assert on(FAULTY, "/usr/local/sbin/kiln-health", "--report").startswith("healthy")
        assert wait_for(lambda r: all(r[n][0] == "idle" for n in (FAULTY, OTHER)), 60)

        # A fault on one node: it is drained within an interval or two, naming the probe.
        edit_expectations(FAULTY, mounts=[MOUNT])
        assert wait_for(lambda r: r[FAULTY][0].startswith("drain"), 3 * INTERVAL + 15), reasons()
        state_now = reasons()
        assert state_now[FAULTY][1] == f"kiln:health:mount: mount {MOUNT} missing"
        assert parse_reason(state_now[FAULTY][1]).kind == "health"
        assert state_now[OTHER][0] == "idle", state_now
        last = json.loads(on(FAULTY, "cat", "/var/lib/kiln/health/last.json"))
        assert last["ok"] is False and last["action"]["verb"] in ("drain", "none")
        # `kiln status --health` shows each node's last result, read over SSH.
        status = subprocess.run(
            [KILN, "status", str(inventory), "--health", "--json"],
            capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "KILN_HOME": str(state)},
        )  # fmt: skip
        assert status.returncode == 0, status.stderr[-3000:]
        cells = {n["name"]: n.get("health") for n in json.loads(status.stdout)["nodes"]}
        assert cells[FAULTY]["ok"] is False, cells
        assert cells[FAULTY]["text"].startswith(f"FAIL mount: mount {MOUNT} missing"), cells
        assert cells[OTHER]["ok"] is True, cells
        assert f"unhealthy at their last check: {FAULTY}" in status.stderr

        # Cleared, with auto_resume off: the health drain stays.
        edit_expectations(FAULTY, mounts=[])
        time.sleep(3 * INTERVAL)
        assert reasons()[FAULTY][1].startswith("kiln:health:mount:")

        # auto_resume on: the next passing check resumes it.
        edit_expectations(FAULTY, auto_resume=True)
        assert wait_for(lambda r: r[FAULTY][0] == "idle", 3 * INTERVAL + 15), reasons()

        # An operator's drain is never lifted by a passing check, even with auto_resume on.
        edit_expectations(OTHER, auto_resume=True)
        on(CTL, "scontrol", "update", f"nodename={OTHER}", "state=drain", f"reason={OPERATOR}")
        time.sleep(3 * INTERVAL)
        assert reasons()[OTHER] in (("drained", OPERATOR), ("draining", OPERATOR)), reasons()
    finally:
        on(CTL, "scontrol", "update", f"nodename={FAULTY},{OTHER}", "state=resume", check=False)
        provision_slurm(provisioned_sandbox.inventory, state)  # health off again, as before
        shown = on(CTL, "scontrol", "show", "config")
        assert "kiln-health" not in (setting(shown, "HealthCheckProgram") or "")
