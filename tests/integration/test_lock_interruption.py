"""Trust under interruption (issue 27), on the sandbox: two runners (two state directories).

A provision in runner A holds the cluster's lock on kiln-ctl; `kiln burnin` and `kiln slurm
rotate-munge-key` from runner B exit 3 naming it and touch nothing. Then A's holder shell on the
controller is killed (what a TTL expiry, an OOM kill or an operator's `kill` does): A stops
before its next stage, exits 3 saying it lost the lock, and does not record the run on the
controller. Nodes are left as the stages that finished left them (no drain is placed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.sandbox import config

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
REPO = Path(__file__).resolve().parents[2]
CONTROLLER = config.CONTROLLER  # kiln-ctl, or <KILN_SANDBOX>-ctl
STATE_DIR = "/var/lib/kiln/state"
# Kill the holder shell of one run: its command line carries the lock script and the holder's
# JSON (with the run's pid). `KILN-LOCK-O[K]` keeps this script from matching itself.
KILL_HOLDER = (
    "for p in /proc/[0-9]*; do "
    'grep -q "KILN-LOCK-O[K]" "$p/cmdline" 2>/dev/null && grep -q "\\"pid\\": $PID," "$p/cmdline" '
    '&& kill -9 "${p#/proc/}" && echo "killed ${p#/proc/}"; done; true'
)


def _kiln(args: list[str], home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KILN, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "KILN_HOME": str(home)},
        timeout=timeout,
        check=False,
    )


def _holder() -> dict:
    proc = subprocess.run(
        ["docker", "exec", CONTROLLER, "cat", f"{STATE_DIR}/holder.json"],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return json.loads(proc.stdout or "{}")
    except ValueError:
        return {}


def test_a_held_lock_keeps_other_commands_out_and_a_lost_one_stops_the_run(sandbox, tmp_path):
    home_a, home_b = tmp_path / "runner-a", tmp_path / "runner-b"
    # --full: every stage runs on every node (a drift-aware run of a converged sandbox skips
    # them); three stages, so the kill lands before the last one starts
    a = subprocess.Popen(
        [KILN, "provision", str(sandbox.inventory), "--stages", "preflight,base,slurm",
         "--full", "--yes", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "KILN_HOME": str(home_a)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while _holder().get("pid") != a.pid:
            assert a.poll() is None, a.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "runner A never took the controller's lock"
            time.sleep(0.2)
        run_id = _holder()["run_id"]

        for args in (
            ["burnin", str(sandbox.inventory), "--suite", "quick", "--seconds", "5"],
            ["slurm", "rotate-munge-key", str(sandbox.inventory), "--yes"],
        ):
            refused = _kiln(args, home_b)
            said = refused.stderr
            assert refused.returncode == 3, said[-3000:]
            assert f"locked on controller {CONTROLLER}" in said, said[-3000:]
            assert "`kiln provision` by" in said and f"pid {a.pid} " in said, said[-3000:]
            assert f"run {run_id}" in said, said[-3000:]
        assert not (home_b / "runs").exists() or not any((home_b / "runs").iterdir())

        killed = subprocess.run(
            ["docker", "exec", "-e", f"PID={a.pid}", CONTROLLER, "sh", "-c", KILL_HOLDER],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert "killed" in killed.stdout, killed
        out, err = a.communicate(timeout=600)
    finally:
        if a.poll() is None:
            a.kill()
            a.communicate()
    assert a.returncode == 3, err[-3000:]
    assert "kiln provision lost the cluster's lock and stopped" in err, err[-3000:]
    assert "Traceback" not in err
    summary = json.loads(out)
    assert summary["run_id"] == run_id
    assert "was lost" in summary["stopped"]["reason"], summary["stopped"]
    stages = {entry["name"]: entry for entry in summary["stages"]}
    assert stages["slurm"]["status"] == "skipped", stages["slurm"]
    # the loss is seen before base's next shard (base stops, the rollout with it) or, when the
    # kill lands in base's last shard, before the slurm stage: either way slurm never starts
    assert stages["slurm"]["reason"] in ("lock lost", "the rollout stopped"), stages["slurm"]
    # Without the lock, the run is not recorded on the controller.
    state = subprocess.run(
        ["docker", "exec", CONTROLLER, "cat", f"{STATE_DIR}/state.json"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    assert json.loads(state or "{}").get("last_run", {}).get("id") != run_id
    # The lock is free again: nothing was left held.
    status = _kiln(["unlock", str(sandbox.inventory)], home_b)
    assert status.returncode == 0 and "is not locked" in status.stderr, status.stderr[-2000:]
