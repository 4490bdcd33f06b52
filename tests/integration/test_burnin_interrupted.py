"""`kiln burnin` killed while its jobs run, for real: no untested node goes into service.

Both nodes are quarantined (drained with kiln's quarantine reason), a burn-in starts, and once
its GEMM jobs run (the nodes show `draining`: the window put the drains back under the running
jobs) kiln is killed, first with SIGTERM (it cancels its jobs, deletes its reservation and exits
143), then with SIGKILL (nothing of kiln runs afterwards: `kiln status` names the reservation and
the jobs it left). The test then removes what is left of the reservation and lets the jobs end:
every node still holds its quarantine, reason intact. A last burn-in undoes nothing more, passes
and resumes them (the sandbox is left as it was found). A second test drains a node by hand while
the jobs run: the burn-in leaves it untested, its reason intact.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.sandbox import config

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
CTL = config.CONTROLLER
NODES = [config.node_name(1), config.node_name(2)]
QUARANTINE = "kiln:quarantine:TEST-27: new node, quarantined until burn-in passes"


def slurm(*argv: str, check: bool = True) -> str:
    return subprocess.run(
        ["docker", "exec", CTL, *argv], capture_output=True, text=True, check=check
    ).stdout.strip()


def states() -> dict[str, str]:
    """node -> 'state|reason' as sinfo prints them, less the suffix of a reserved node ($)."""
    lines = slurm("sinfo", "--noheader", "--Node", "--format=%N|%T|%E").splitlines()
    return {n: f"{s.rstrip('$')}|{r}" for n, s, r in (line.split("|", 2) for line in lines)}


def kiln_jobs() -> list[str]:
    """`id|name|state` of kiln's burn-in jobs still in the queue."""
    lines = slurm("squeue", "--noheader", "--all", "--format=%i|%j|%T").splitlines()
    return [line for line in lines if "|kiln-burnin-" in line]


def wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out after {seconds:g}s waiting for {what}: {states()}")


def held_until_drained(seconds: float = 60) -> dict[str, str]:
    """Slurm's view once no node is still `draining` (a job that has left squeue may still be
    completing on its node); at every sample each node holds its quarantine, never lifted."""
    deadline = time.monotonic() + seconds
    while True:
        now = states()
        held = {n: s.split("|", 1)[0] in ("drained", "draining") for n, s in now.items()}
        assert all(held[n] and now[n].endswith(f"|{QUARANTINE}") for n in NODES), now
        if all(now[n].startswith("drained|") for n in NODES) or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def both_draining_under_jobs() -> bool:
    now = states()
    running = [j for j in kiln_jobs() if j.endswith("|RUNNING")]
    return len(running) >= 2 and all(now[n] == f"draining|{QUARANTINE}" for n in NODES)


def start_burnin(inventory: Path, state: Path, log: Path, seconds: int) -> subprocess.Popen:
    argv = [KILN, "burnin", str(inventory), "--suite", "quick", "--seconds", str(seconds),
            "--skip-runtime"]  # fmt: skip
    return subprocess.Popen(
        argv, stdout=log.open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "KILN_HOME": str(state)},
    )  # fmt: skip


@pytest.fixture
def lenient(provisioned_sandbox, tmp_path) -> Path:
    """The sandbox inventory with a GEMM floor any loaded machine meets."""
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    with (inventory / "group_vars" / "all.yml").open("a", encoding="utf-8") as handle:
        handle.write("\nkiln_burnin:\n  gemm_tflops_floor: 0.0001\n")
    return inventory


def test_a_killed_burnin_leaves_every_quarantined_node_drained(
    provisioned_sandbox, lenient, tmp_path
):
    state = provisioned_sandbox.state
    nodes = ",".join(NODES)
    slurm("scontrol", "update", f"nodename={nodes}", "state=drain", f"reason={QUARANTINE}")
    try:
        # SIGTERM: kiln cleans up (jobs cancelled, reservation deleted) and exits 143.
        run = start_burnin(lenient, state, tmp_path / "term.log", seconds=60)
        wait_for(both_draining_under_jobs, 180, "the GEMM jobs running under the drains")
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=120) == 143, (tmp_path / "term.log").read_text()
        assert "No reservations" in slurm("scontrol", "show", "reservation")
        wait_for(lambda: not kiln_jobs(), 120, "the cancelled jobs to leave the queue")
        assert held_until_drained() == dict.fromkeys(NODES, f"drained|{QUARANTINE}")

        # SIGKILL: nothing of kiln runs; its reservation and jobs are left behind.
        run = start_burnin(lenient, state, tmp_path / "kill.log", seconds=20)
        wait_for(both_draining_under_jobs, 180, "the GEMM jobs running under the drains")
        run.kill()
        run.wait(timeout=30)
        shown = subprocess.run(
            [KILN, "status", str(lenient), "--json"], capture_output=True, text=True,
            env={**os.environ, "KILN_HOME": str(state)}, check=False, timeout=120,
        )  # fmt: skip
        (left,) = json.loads(shown.stdout)["unfinished_burnins"]
        assert left["reservation"].startswith("kiln-burnin-") and left["jobs"]
        assert "unfinished burn-in" in shown.stderr
        # Every node stays unschedulable while the reservation and the jobs are gone.
        wait_for(lambda: not kiln_jobs(), 180, "the left jobs to end")
        slurm("scontrol", "delete", f"reservationname={left['reservation']}")
        assert held_until_drained() == dict.fromkeys(NODES, f"drained|{QUARANTINE}")
    finally:
        # The next burn-in undoes whatever is left, passes and resumes the nodes.
        done = subprocess.run(
            [KILN, "burnin", str(lenient), "--suite", "quick", "--seconds", "5",
             "--skip-runtime"],
            capture_output=True, text=True, env={**os.environ, "KILN_HOME": str(state)},
            check=False, timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert all(f"resumed {n}" in done.stderr for n in NODES)
    # A node just resumed may show completing for a moment before Slurm reports it idle.
    wait_for(lambda: all(s.startswith("idle|") for s in states().values()), 60, "idle nodes")


def test_a_drain_placed_by_hand_during_a_burnin_survives_it(provisioned_sandbox, lenient, tmp_path):
    state = provisioned_sandbox.state
    by_hand = "reseat cable (by hand, during burn-in)"
    run = start_burnin(lenient, state, tmp_path / "hand.log", seconds=20)
    try:
        wait_for(lambda: [j for j in kiln_jobs() if j.endswith("|RUNNING")], 180, "a running job")
        slurm("scontrol", "update", f"nodename={NODES[1]}", "state=drain", f"reason={by_hand}")
        assert run.wait(timeout=600) == 1  # incomplete: one node left the run untested
        log = (tmp_path / "hand.log").read_text()
        assert f"{NODES[1]}: not tested: drained by someone else during the run" in log
        assert states()[NODES[1]] == f"drained|{by_hand}"
        assert states()[NODES[0]].startswith("idle|")
    finally:
        run.kill()
        slurm("scontrol", "update", f"nodename={NODES[1]}", "state=resume", check=False)
