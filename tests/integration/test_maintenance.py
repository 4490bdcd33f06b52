"""Safe maintenance (the driver upgrade's drain, wait, resume) against the sandbox's real Slurm.

The role drains only a node that is in service, with `kiln:maintenance:<run id>: ...`, and
resumes only a node still drained with exactly that reason: a node drained for any other
reason (a failed burn-in, an operator, an earlier run) keeps it through every run. With
slurmctld down nothing starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.sandbox import config

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(__file__).parent / "playbooks" / "maintenance.yml"
ROLLING = Path(__file__).parent / "playbooks" / "rolling.yml"  # batches of one, stop at a failure
SEEN, FAIL = "/var/lib/kiln/rolling-seen", "/var/lib/kiln/rolling-fail"
BIN = Path(sys.executable).parent
CTL = config.CONTROLLER
NODE1, NODE2 = config.node_name(1), config.node_name(2)
KILN = str(BIN / "kiln")
DONE = "/var/lib/kiln/maintenance-done"
# What a failed burn-in leaves (kiln.burnin.campaign drains with kind burnin and its run id).
FAILED_BURNIN = "kiln:burnin:20261130T101500Z-3f9a1c: gemm cpu0 0.0004 TFLOPS < floor 0.001"


def on(container: str, *argv: str, check: bool = True) -> str:
    return subprocess.run(
        ["docker", "exec", container, *argv], capture_output=True, text=True, check=check
    ).stdout.strip()


def state(node: str) -> str:
    return on(CTL, "sinfo", "--noheader", "--Node", "--nodes", node, "--format", "%T|%E")


def ours(run_id: str) -> str:
    """The reason the test playbook drains with in run `run_id` (kiln.parsers.drain_reason)."""
    return f"kiln:maintenance:{run_id}: test maintenance"


def new_run_id(label: str) -> str:
    return f"itest-{label}-{time.time_ns()}"


def maintenance(
    inventory: Path, node: str, timeout: int, run_id: str, *extra: str, playbook: Path = PLAYBOOK
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(ROOT / "playbooks" / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(ROOT / "playbooks" / "filter_plugins"),  # the grammar
        "ANSIBLE_FORCE_COLOR": "0",
    }
    return subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(inventory),
            str(playbook),
            "-e",
            f"target={node}",
            "-e",
            f"maintenance_timeout={timeout}",
            "-e",
            f"kiln_run_id={run_id}",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def wait_for(predicate, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(1)


def done_on(node: str) -> bool:
    """Whether the playbook's work ran on `node` (it touches DONE)."""
    return subprocess.run(["docker", "exec", node, "test", "-e", DONE], check=False).returncode == 0


def resume_drained(node: str, *reasons: str) -> None:
    """Resume `node` when it is drained with a reason starting with one of `reasons`. Slurm
    23.11+ keeps a resumed node's last reason (Debian 13's 24.11 shows "idle|<it>"), so the
    state is read beside it."""
    now = state(node)
    drained = now.split("|")[0].startswith("drain")  # drain, drained, draining
    if drained and any(f"|{reason}" in now for reason in reasons):
        on(CTL, "scontrol", "update", f"nodename={node}", "state=resume")


def fresh(*nodes: str) -> None:
    """Nodes in service without the work's marker (after an interrupted earlier run)."""
    for node in nodes:
        on(node, "rm", "-f", DONE)
        resume_drained(node, "kiln:maintenance:itest-", FAILED_BURNIN)
    wait_for(lambda: all(state(node).startswith("idle|") for node in nodes))


def test_a_running_job_is_waited_for_and_a_drain_left_by_a_run_is_never_taken_over(
    provisioned_sandbox,
):
    inventory = provisioned_sandbox.inventory
    fresh(NODE1)
    first = new_run_id("job")
    job = on(CTL, "sbatch", "--parsable", "-w", NODE1, "--wrap", "sleep 300")
    try:
        wait_for(lambda: on(CTL, "squeue", "-h", "-j", job, "-o", "%T") == "RUNNING")
        skipped = maintenance(inventory, NODE1, timeout=4, run_id=first)
        assert skipped.returncode != 0
        assert f"still runs job(s) {job} after 4 s; skipped and left drained" in skipped.stdout
        assert state(NODE1) in (f"draining|{ours(first)}", f"drng|{ours(first)}")
        assert not done_on(NODE1)  # the work never ran under the job
    finally:
        on(CTL, "scancel", job)
    wait_for(lambda: on(CTL, "squeue", "-h", "-w", NODE1) == "")

    # The next run finds the node drained by the first one: it does the work (no job can run
    # there) but keeps that drain and does not resume it.
    again = maintenance(inventory, NODE1, timeout=60, run_id=new_run_id("again"))
    assert again.returncode == 0, again.stdout[-3000:]
    assert done_on(NODE1)
    assert f"{NODE1} left alone: already IDLE+DRAIN ({ours(first)})" in again.stdout
    assert state(NODE1) == f"drained|{ours(first)}"

    # Resumed by hand (the failure message says how), a run drains and resumes it.
    resumed = subprocess.run(
        [KILN, "resume", str(inventory), NODE1, "--force"], capture_output=True, text=True,
        env={**os.environ, "KILN_HOME": str(provisioned_sandbox.state)}, timeout=120,
        check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    wait_for(lambda: state(NODE1).startswith("idle|"))
    on(NODE1, "rm", "-f", DONE)
    done = maintenance(inventory, NODE1, timeout=60, run_id=new_run_id("clean"))
    assert done.returncode == 0, done.stdout[-3000:]
    assert done_on(NODE1)
    wait_for(lambda: state(NODE1).startswith("idle|"))


def test_a_node_an_operator_drained_is_left_drained(provisioned_sandbox):
    fresh(NODE2)
    on(CTL, "scontrol", "update", f"nodename={NODE2}", "state=drain", "reason=operator: bad fan")
    try:
        result = maintenance(provisioned_sandbox.inventory, NODE2, 30, new_run_id("operator"))
        assert result.returncode == 0, result.stdout[-3000:]
        assert state(NODE2) in ("drained|operator: bad fan", "drain|operator: bad fan")
        assert f"{NODE2} left alone: already IDLE+DRAIN (operator: bad fan)" in result.stdout
        assert done_on(NODE2)  # still worked on: drained, no job runs there
    finally:
        on(CTL, "scontrol", "update", f"nodename={NODE2}", "state=resume")


def test_a_node_a_failed_burnin_drained_keeps_its_reason_through_provision_and_a_rolling_change(
    provisioned_sandbox,
):
    """The real bug: a driver upgrade overwrote a failed burn-in's drain with its own and then
    resumed the node into production. The failed node (drained here with burn-in's reason by
    scontrol, standing in for the failed burn-in) keeps that drain through a full `kiln
    provision` and through a rolling change over both nodes, which drains and resumes the other
    node."""
    inventory = provisioned_sandbox.inventory
    fresh(NODE1, NODE2)
    on(CTL, "scontrol", "update", f"nodename={NODE2}", "state=drain", f"reason={FAILED_BURNIN}")
    try:
        proc = subprocess.run(
            [KILN, "provision", str(inventory), "--yes", "--json"], capture_output=True,
            text=True, env={**os.environ, "KILN_HOME": str(provisioned_sandbox.state)},
            timeout=1800, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert state(NODE2) == f"drained|{FAILED_BURNIN}"
        assert state(NODE1).startswith("idle|")

        run_id = new_run_id("rolling")
        rolling = maintenance(inventory, f"{NODE1},{NODE2}", 60, run_id, "-v")  # -v: argv
        out = rolling.stdout
        assert rolling.returncode == 0, out[-3000:]
        assert done_on(NODE1) and done_on(NODE2)
        assert f"{NODE2} left alone: already IDLE+DRAIN ({FAILED_BURNIN})" in out
        assert f"{NODE2} not resumed: it was already IDLE+DRAIN ({FAILED_BURNIN})" in out
        assert state(NODE2) == f"drained|{FAILED_BURNIN}"
        # The other node was drained with this run's reason and resumed by it.
        assert f'"nodename={NODE1}", "state=drain", "reason={ours(run_id)}"' in out, out[-3000:]
        assert f'"nodename={NODE1}", "state=resume"' in out
        assert f'"nodename={NODE2}", "state=' not in out  # never drained, never resumed
        wait_for(lambda: state(NODE1).startswith("idle|"))
    finally:
        on(CTL, "scontrol", "update", f"nodename={NODE2}", "state=resume")
        on(NODE1, "rm", "-f", DONE)
        on(NODE2, "rm", "-f", DONE)


def test_with_slurmctld_stopped_a_disruptive_change_changes_no_node(provisioned_sandbox):
    fresh(NODE1, NODE2)
    before = {node: state(node) for node in (NODE1, NODE2)}
    on(CTL, "systemctl", "stop", "slurmctld")
    try:
        result = maintenance(provisioned_sandbox.inventory, f"{NODE1},{NODE2}", 30,
                             new_run_id("ctld-down"))  # fmt: skip
        out = result.stdout
        assert result.returncode != 0, out[-3000:]
        for node in (NODE1, NODE2):
            assert f"slurmctld does not answer on {CTL}, so {node} is neither drained" in out
            assert not done_on(node)  # the disruptive step ran on no node
        assert "is DOWN" in out  # scontrol ping's own words
        assert "changed: [" not in out
    finally:
        on(CTL, "systemctl", "start", "slurmctld")
        wait_for(lambda: "is UP" in on(CTL, "scontrol", "ping", check=False), seconds=120)
    wait_for(lambda: all(state(node) == before[node] for node in before), seconds=120)


# --- rolling changes: batches of one through slurm_maintenance's rolling step -----------------


def rolled(run_id: str) -> str:
    """The reason the rolling test playbook drains with in run `run_id`."""
    return f"kiln:maintenance:{run_id}: test rolling change"


def seen(node: str) -> tuple[dict[str, str], str]:
    """What Slurm showed while `node` was changed: {node: "state|reason"}, and its jobs."""
    text = on(node, "cat", SEEN)
    nodes, _, jobs = text.partition("jobs:")
    found = {}
    for line in nodes.splitlines():
        name, _, rest = line.partition("|")
        if name:
            found[name] = rest
    return found, jobs.strip()


def clean_rolling(*nodes: str) -> None:
    for node in nodes:
        on(node, "rm", "-f", SEEN, FAIL)
        resume_drained(node, "kiln:maintenance:itest-")


def test_a_rolling_change_drains_changes_and_resumes_batch_1_before_batch_2_starts(
    provisioned_sandbox,
):
    fresh(NODE1, NODE2)
    clean_rolling(NODE1, NODE2)
    run_id = new_run_id("batches")
    try:
        result = maintenance(provisioned_sandbox.inventory, f"{NODE1},{NODE2}", 60, run_id,
                             playbook=ROLLING)  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:]
        first, _ = seen(NODE1)
        second, _ = seen(NODE2)
        # While batch 1 (node01) was changed it was drained with this run's reason and batch 2
        # was still in service; while batch 2 was changed, batch 1 was already back in service.
        assert first[NODE1] == f"drained|{rolled(run_id)}"
        assert first[NODE2].startswith("idle|")
        assert second[NODE2] == f"drained|{rolled(run_id)}"
        assert second[NODE1].startswith("idle|")
        wait_for(lambda: all(state(n).startswith("idle|") for n in (NODE1, NODE2)))
    finally:
        clean_rolling(NODE1, NODE2)


def test_a_rolling_change_waits_for_a_running_job_then_proceeds(provisioned_sandbox):
    fresh(NODE1)
    clean_rolling(NODE1)
    job = on(CTL, "sbatch", "--parsable", "-w", NODE1, "--wrap", "sleep 20")
    try:
        wait_for(lambda: on(CTL, "squeue", "-h", "-j", job, "-o", "%T") == "RUNNING")
        run_id = new_run_id("waits")
        result = maintenance(provisioned_sandbox.inventory, NODE1, 180, run_id, playbook=ROLLING)
        assert result.returncode == 0, result.stdout[-3000:]
        found, jobs = seen(NODE1)
        assert found[NODE1] == f"drained|{rolled(run_id)}"  # changed only once empty
        assert jobs == ""
        # The job ran to its end (not cancelled): slurmctld keeps its record for MinJobAge.
        assert "JobState=COMPLETED" in on(CTL, "scontrol", "show", "job", job)
        wait_for(lambda: state(NODE1).startswith("idle|"))
    finally:
        on(CTL, "scancel", job, check=False)
        clean_rolling(NODE1)


def test_a_failed_check_keeps_the_node_drained_and_stops_the_rollout(provisioned_sandbox):
    fresh(NODE1, NODE2)
    clean_rolling(NODE1, NODE2)
    on(NODE1, "touch", FAIL)
    run_id = new_run_id("stop")
    try:
        result = maintenance(provisioned_sandbox.inventory, f"{NODE1},{NODE2}", 60, run_id,
                             playbook=ROLLING)  # fmt: skip
        out = result.stdout
        assert result.returncode != 0, out[-3000:]
        assert (
            f"{NODE1}: the check after test rolling change failed, left drained "
            f"({rolled(run_id)}): test check failed on {NODE1}"
        ) in out
        assert state(NODE1) == f"drained|{rolled(run_id)}"
        # max_fail_percentage 0: the next batch is never drained nor changed.
        assert state(NODE2).startswith("idle|")
        assert subprocess.run(["docker", "exec", NODE2, "test", "-e", SEEN],
                              check=False).returncode != 0  # fmt: skip
    finally:
        clean_rolling(NODE1, NODE2)
    wait_for(lambda: all(state(n).startswith("idle|") for n in (NODE1, NODE2)))
