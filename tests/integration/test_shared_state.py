"""State shared by every runner (issue 18): the provision lock and the cluster's state live on the
controller (kiln-ctl:/var/lib/kiln/state), so two runners never both proceed.

Two `kiln provision --stages base` started at once from two state directories (two pipelines,
or two operators in two checkouts): exactly one proceeds, the other exits 3 naming the holder
(its pid, host, user, start time and run id); the winner's run is recorded on the controller
and a fresh runner reads the joined nodes from there.
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

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
REPO = Path(__file__).resolve().parents[2]
CONTROLLER = "kiln-ctl"
STATE_DIR = "/var/lib/kiln/state"


def _start(inventory: Path, home: Path) -> subprocess.Popen:
    return subprocess.Popen(
        # --full: the base stage's tasks run under the lock for tens of seconds, so the two runs
        # overlap (a drift-aware run of a converged sandbox ends in about a second)
        [KILN, "provision", str(inventory), "--stages", "base", "--full", "--yes", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "KILN_HOME": str(home)},
    )


def _controller_file(name: str) -> str:
    proc = subprocess.run(
        ["docker", "exec", CONTROLLER, "cat", f"{STATE_DIR}/{name}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout if proc.returncode == 0 else ""


def test_two_runners_at_once_only_one_proceeds(sandbox, tmp_path):
    homes = [tmp_path / "runner-a", tmp_path / "runner-b"]
    runs = [_start(sandbox.inventory, home) for home in homes]
    outputs = [run.communicate(timeout=1800) for run in runs]
    codes = [run.returncode for run in runs]
    assert sorted(codes) == [0, 3], [err[-3000:] for _, err in outputs]
    winner = codes.index(0)
    loser = 1 - winner
    won_out, won_err = outputs[winner]
    _, lost_err = outputs[loser]
    summary = json.loads(won_out)
    # The winner took the controller's lock (not a local fallback), and said so.
    assert f"state: controller {CONTROLLER}" in won_err, won_err[-2000:]
    # The loser names the holder: the winner's pid, its run id, on the controller's lock.
    assert f"pid {runs[winner].pid} " in lost_err, lost_err
    assert f"run {summary['run_id']}" in lost_err, lost_err
    assert CONTROLLER in lost_err, lost_err
    assert not (homes[loser] / "runs").exists()  # the loser ran nothing
    # The lock is free again (its holder exited) and the run is on the controller.
    state = json.loads(_controller_file("state.json"))
    assert state["last_run"]["id"] == summary["run_id"]
    assert state["last_run"]["result"] == "ok"
    for node in sandbox.nodes:
        assert state["nodes"][node.name]["last_run"] == summary["run_id"], node.name
        assert state["nodes"][node.name]["joined"], node.name
    status = subprocess.run(
        [KILN, "unlock", str(sandbox.inventory)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "KILN_HOME": str(homes[loser])},
        timeout=120,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert "is not locked" in status.stderr


def test_a_fresh_runner_finds_no_new_node(sandbox, tmp_path):
    """--new-nodes on a runner with no local records: the controller's state says every node
    has joined (the previous test, or any earlier provision, recorded them), so nothing runs
    but the refresh of the cluster-wide files."""
    state = json.loads(_controller_file("state.json") or "{}")
    if not all(state.get("nodes", {}).get(n.name, {}).get("joined") for n in sandbox.nodes):
        pytest.skip("run test_two_runners_at_once_only_one_proceeds first")
    proc = subprocess.run(
        [KILN, "provision", str(sandbox.inventory), "--stages", "base", "--new-nodes",
         "--yes", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "KILN_HOME": str(tmp_path / "fresh")},
        timeout=1800,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["new_nodes"]["new"] == []
    assert sorted(summary["new_nodes"]["existing"]) == sorted(n.name for n in sandbox.nodes)


def test_an_unreachable_controller_refuses_the_run_instead_of_a_local_lock(sandbox, tmp_path):
    """kiln_state.backend auto (the default), the controller's SSH port closed (a transient
    fault, as far as kiln can tell): exit 3 before anything runs, never a local-lock fallback
    that a second runner on another machine could take too (docs/gitops.md, the fallback rule)."""
    inventory = tmp_path / "inventory"
    shutil.copytree(sandbox.inventory, inventory)
    hosts = inventory / "hosts.yml"
    settings = yaml.safe_load(hosts.read_text())
    controllers = settings["all"]["children"]["kiln_controllers"]["hosts"]
    controllers[CONTROLLER]["ansible_port"] = 1  # nothing listens there: connection refused
    hosts.write_text(yaml.safe_dump(settings, sort_keys=False))
    home = tmp_path / "runner"
    proc = subprocess.run(
        [KILN, "provision", str(inventory), "--stages", "base", "--yes"],
        capture_output=True, text=True, cwd=REPO, timeout=300, check=False,
        env={**os.environ, "KILN_HOME": str(home)},
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "cannot reach the controller's lock" in proc.stderr, proc.stderr[-3000:]
    assert "kiln_state.backend: local" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())  # ran nothing
