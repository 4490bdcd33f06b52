"""Quarantine: new nodes, and nodes whose hardware changed, join drained until burn-in passes.

The sandbox inventory has quarantine on, as a real site would (the session fixture burns the
nodes in, so tests start from idle nodes); these tests work on a copy. The first checks the
drain, its reason and that a second apply changes nothing; the second adds a node with
`kiln provision --new-nodes` while a thread polls Slurm throughout, and checks that Slurm never
shows the node schedulable before its burn-in passes (it is drained before slurmd first
registers it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from kiln.parsers.drain_reason import parse_reason
from kiln.sandbox import config

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
CTL = config.CONTROLLER
NODES = [config.node_name(1), config.node_name(2)]
MARKER = "/var/lib/kiln/slurm-joined"


APT_LOCK_WAIT = "-o DPkg::Lock::Timeout=300"  # seconds apt waits for dpkg's lock


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


def quarantined(reason: str, why: str) -> bool:
    """Whether `reason` is kiln's quarantine drain for `why` ("new node", "hardware changed")."""
    parsed = parse_reason(reason)
    return parsed is not None and parsed.kind == "quarantine" and parsed.why.startswith(why)


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
    settings["kiln_burnin"] = {"gemm_tflops_floor": 0.0001}  # a loaded CI machine's GEMM
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    for node in NODES:  # as if kiln had never seen them
        on(node, "rm", "-f", MARKER)
    try:
        proc = kiln("provision", str(inventory), "--stages", "slurm", "--yes", state=state)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for node in NODES:
            state_, reason = reasons()[node].split("|", 1)
            assert state_ in ("drained", "draining"), (node, state_)
            assert quarantined(reason, "new node"), reason

        # A second apply changes nothing: the nodes are known now.
        again = kiln("provision", str(inventory), "--stages", "slurm", "--full", "--yes",
                     "--json", state=state)  # fmt: skip
        assert again.returncode == 0, again.stderr[-3000:]
        assert '"changed": 0' in again.stdout

        # A quarantine is burn-in's to lift; `kiln resume` lifts it only when forced.
        resumed = kiln("resume", str(inventory), ",".join(NODES), "--force", state=state)
        assert resumed.returncode == 0, resumed.stderr
        seen = wait_idle(NODES)
        assert all(seen[n].startswith("idle|") for n in NODES), seen

        # Different hardware on one node (what kiln recorded no longer matches): back in
        # quarantine with that reason.
        on(NODES[1], "sh", "-c", f"echo 'cpus=1 memory_gib=1 gpus=0 model=none' > {MARKER}")
        changed = kiln("provision", str(inventory), "--stages", "slurm", "--yes", "--json",
                       state=state)  # fmt: skip
        assert changed.returncode == 0, changed.stderr[-3000:]
        assert quarantined(reasons()[NODES[1]].split("|", 1)[1], "hardware changed")
        # The run record says why, and the lifecycle on the controller has it quarantined.
        why = json.loads(changed.stdout)["quarantined"]
        assert list(why) == [NODES[1]] and why[NODES[1]].startswith("hardware changed: "), why
        status = json.loads(kiln("status", str(inventory), "--json", state=state).stdout)
        assert {n["name"]: n["lifecycle"] for n in status["nodes"]}[NODES[1]] == "quarantined"
        assert wait_idle(NODES[:1])[NODES[0]].startswith("idle|")

        # The same shape, another board under the same name (what kiln recorded of its serials
        # no longer matches what the node's reader prints): the drift probe names it, and a
        # plain, drift-aware provision runs the slurm stage there and quarantines it again;
        # the other node is left alone.
        resumed = kiln("resume", str(inventory), NODES[1], "--force", state=state)
        assert resumed.returncode == 0, resumed.stderr
        assert wait_idle(NODES)[NODES[1]].startswith("idle|")
        seen = on(NODES[1], "cat", MARKER)
        assert re.search(r" board=\S+ gpu_serials=\S* hca_guids=\S*$", seen), seen
        swapped = re.sub(r" board=\S+", " board=REPLACED/BOARD", seen)
        on(NODES[1], "sh", "-c", f"echo '{swapped}' > {MARKER}")
        planned = kiln("plan", str(inventory), "--live", "--json", state=state)
        assert planned.returncode == 0, planned.stderr[-3000:]
        decided = json.loads(planned.stdout)["drift"]["stages"]["slurm"]
        assert decided[NODES[1]]["reason"] == "drifted", decided
        # (the record is a file the slurm stage manages, so its edit is file drift too; on a
        # real node nothing edits it and the identity alone runs the stage: test_node_identity)
        identity = [d for d in decided[NODES[1]]["details"] if d["kind"] == "identity"]
        assert [d["name"] for d in identity] == ["hardware changed: board"], decided
        assert decided[NODES[0]]["reason"] == "unchanged", decided
        drifted = kiln("provision", str(inventory), "--yes", state=state)
        assert drifted.returncode == 0, drifted.stderr[-3000:]
        assert quarantined(reasons()[NODES[1]].split("|", 1)[1], "hardware changed: board")
        assert reasons()[NODES[0]].startswith("idle|")
        assert on(NODES[1], "cat", MARKER) == seen  # what it is now, recorded once drained

        # Only a passing burn-in puts it back in service, in Slurm and in its lifecycle.
        burnin = kiln("burnin", str(inventory), "--suite", "quick", "--seconds", "5", "--json",
                      state=state)  # fmt: skip
        assert burnin.returncode == 0, burnin.stderr[-4000:]
        assert NODES[1] in json.loads(burnin.stdout)["resumed"]
        assert wait_idle(NODES)[NODES[1]].startswith("idle|")
        status = json.loads(kiln("status", str(inventory), "--json", state=state).stdout)
        assert {n["name"]: n["lifecycle"] for n in status["nodes"]}[NODES[1]] == "in_service"
    finally:
        kiln("resume", str(inventory), ",".join(NODES), "--force", state=state)
        restore = kiln("provision", str(provisioned_sandbox.inventory), "--stages", "slurm",
                       "--yes", state=state)  # fmt: skip
        assert restore.returncode == 0, restore.stderr[-3000:]


# Slurm states in which the scheduler may start a job on the node (sinfo --Node, long form).
# Any suffix counts too ("idle*"); drained, draining, reserved (burn-in's reservation), unknown,
# down, inval and "not in slurm.conf" do not.
SCHEDULABLE = re.compile(r"^(idle|mixed|allocated|completing)")


class Poller(threading.Thread):
    """Slurm's view of one node, every half second, until stopped: (monotonic time, line)."""

    def __init__(self, node: str) -> None:
        super().__init__(daemon=True)
        self.node = node
        self.samples: list[tuple[float, str]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        argv = ["docker", "exec", CTL, "sinfo", "--noheader", "--Node", "--nodes", self.node,
                "--format", "%T|%E"]  # fmt: skip
        while not self.halt.is_set():
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            line = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
            self.samples.append((time.monotonic(), line or f"absent|{proc.stderr.strip()}"))
            self.halt.wait(0.5)


def _hosts_without(hosts_file: Path, node: str) -> None:
    hosts = yaml.safe_load(hosts_file.read_text())
    del hosts["all"]["children"]["kiln_compute"]["hosts"][node]
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))


def _settings(inventory: Path, quarantine: bool) -> None:
    settings_file = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["kiln_slurm"]["quarantine_new_nodes"] = quarantine
    # Burn-in's absolute GEMM floor suits a loaded CI machine (as in test_burnin.py).
    settings["kiln_burnin"] = {"gemm_tflops_floor": 0.0001}
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))


def test_a_new_node_is_never_schedulable_before_its_burn_in_passes(provisioned_sandbox, tmp_path):
    """kiln-node02 leaves the cluster (slurmd removed, slurm.conf without it), comes back with
    `kiln provision --new-nodes` (every stage on it, slurmd installed again, which starts it),
    then `kiln burnin` passes it. Slurm is polled throughout: before burn-in the node is
    absent, unknown or drained with kiln's quarantine reason, never idle."""
    new = NODES[1]
    home = tmp_path / "home"  # runs of this test only: the new node is the one it left out
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    original_hosts = (inventory / "hosts.yml").read_text()
    poller = Poller(new)
    try:
        # 1. The cluster without the node; the node as a machine that never ran slurmd.
        on(new, "systemctl", "disable", "--now", "slurmd")
        # kiln holds its Slurm packages at the declared version: a machine that never had
        # them has no hold either.
        # the node image's apt-daily timers may hold dpkg's lock: wait for it, as kiln's apt does
        remove = f"DEBIAN_FRONTEND=noninteractive apt-get {APT_LOCK_WAIT} remove -y -qq slurmd"
        on(new, "sh", "-c", f"apt-mark {APT_LOCK_WAIT} unhold slurmd >/dev/null && {remove}")
        on(new, "rm", "-rf", MARKER, "/var/lib/kiln/slurm-restart-pending",
           "/var/lib/kiln/slurm-reconfigure-pending", "/var/spool/slurmd")  # fmt: skip
        _hosts_without(inventory / "hosts.yml", new)
        _settings(inventory, quarantine=False)
        smaller = kiln("provision", str(inventory), "--stages", "slurm", "--yes", state=home)
        assert smaller.returncode == 0, smaller.stderr[-3000:]
        gone = subprocess.run(["docker", "exec", CTL, "scontrol", "show", "node", new],
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert gone.returncode != 0 and "not found" in (gone.stdout + gone.stderr), gone

        # 2. Scale-out with quarantine on, polled from the start.
        (inventory / "hosts.yml").write_text(original_hosts)
        _settings(inventory, quarantine=True)
        poller.start()
        added = kiln("provision", str(inventory), "--new-nodes", "--yes", "--json", state=home)
        assert added.returncode == 0, added.stderr[-3000:]
        assert json.loads(added.stdout)["new_nodes"]["new"] == [new]
        state_, reason = reasons()[new].split("|", 1)
        assert state_ == "drained", state_
        assert quarantined(reason, "new node"), reason

        # 3. Burn-in passes it and resumes it.
        burnin_began = time.monotonic()
        burnin = subprocess.run(
            [KILN, "burnin", str(inventory), "--suite", "quick", "--seconds", "5", "--json"],
            capture_output=True, text=True, timeout=900, check=False,
            env={**os.environ, "KILN_HOME": str(home)},
        )  # fmt: skip
        assert burnin.returncode == 0, burnin.stderr[-4000:]
        document = json.loads(burnin.stdout)
        assert document["passed"] is True and new in document["resumed"], document
        assert wait_idle([new])[new].startswith("idle|")
        time.sleep(1.5)  # the poller sees the resumed node too
    finally:
        poller.halt.set()
        if poller.is_alive():
            poller.join(timeout=10)

        if "drain" in reasons().get(new, ""):
            on(CTL, "scontrol", "update", f"nodename={new}", "state=resume")
        restore = kiln("provision", str(provisioned_sandbox.inventory), "--stages", "slurm",
                       "--yes", state=provisioned_sandbox.state)  # fmt: skip
        assert restore.returncode == 0, restore.stderr[-3000:]

    before = [line for at, line in poller.samples if at < burnin_began]
    seen = {line.split("|", 1)[0] for line in before}
    assert any(line.startswith("absent|") for line in before), seen  # polled from before it joined
    assert any(line.startswith("drained|") for line in before), seen  # and after it registered
    schedulable = [line for line in before if SCHEDULABLE.match(line)]
    assert schedulable == [], (
        f"{new} was schedulable before burn-in: {schedulable[:5]} (seen {seen})"
    )
    for line in before:
        state_, reason = line.split("|", 1)
        if state_.startswith("drain"):
            assert quarantined(reason, "new node"), line
    after = [line for at, line in poller.samples if at >= burnin_began]
    assert any(SCHEDULABLE.match(line) for line in after), after[-5:]  # resumed once it passed
