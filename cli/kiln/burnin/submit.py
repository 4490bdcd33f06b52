"""kiln's burn-in jobs on the Slurm controller: submitted in chunks, polled, cancelled at the end.

    queue = JobQueue(ctl, progress, poll_seconds=3.0)
    pending = queue.run(specs, "node GEMM", limit_minutes=10)  # {kiln name: squeue's reason}
    queue.cancel_active()                                      # on errors and Ctrl-C

One job per node means thousands of scripts on a large fleet: they go SUBMIT_CHUNK to one SSH
exec (Controller.submit_many). The queue is polled with squeue until every job has left it or
the deadline passes (twice the suite's limit, plus what queues behind): then the jobs are
cancelled, and those still PENDING are returned, so the campaign can say which nodes never ran
their tests (busy) instead of judging a missing result as a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from kiln.burnin.jobs import JobSpec
from kiln.errors import OperationFailed
from kiln.slurmctl import commands

SUBMIT_CHUNK = 20  # job scripts per sbatch exec on the controller
HEARTBEAT_S = 10.0  # a line at least this often while jobs run, even when nothing changed


class JobQueue:
    def __init__(
        self,
        ctl: Any,  # kiln.slurmctl.Controller (run, submit_many)
        progress: Callable[[str], None],
        *,
        poll_seconds: float,
        clock: Any = time,  # monotonic() and sleep()
    ) -> None:
        self.ctl = ctl
        self.progress = progress
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.jobs: dict[str, str] = {}  # kiln name -> Slurm job id, every job submitted
        self.active: list[str] = []  # ids not yet seen to end

    def best_effort(self, argv: Sequence[str]) -> str:
        """Run one Slurm command, its failure ignored (polling and cleanup must go on); stdout."""
        try:
            return self.ctl.run([argv], check=False)[0].stdout
        except OperationFailed:  # the controller did not answer
            return ""

    def submit(self, specs: Sequence[JobSpec]) -> list[str]:
        """sbatch the specs, SUBMIT_CHUNK per exec; every id is recorded before an error."""
        ids = []
        for start in range(0, len(specs), SUBMIT_CHUNK):
            part = specs[start : start + SUBMIT_CHUNK]
            got, stderr = self.ctl.submit_many([spec.script for spec in part], part[0].name)
            refused = []
            for spec, job_id in zip(part, got, strict=True):
                if job_id is None:
                    refused.append(spec.name)
                    continue
                self.jobs[spec.name] = job_id
                self.active.append(job_id)
                ids.append(job_id)
            if refused:
                raise OperationFailed(
                    f"sbatch refused {', '.join(refused)}: {stderr or 'no output'}",
                    hint="is the partition up, and does the reservation hold the nodes?",
                )
        return ids

    def run(
        self,
        specs: Sequence[JobSpec],
        what: str,
        *,
        limit_minutes: int,
        submitted: Callable[[list[str]], None] = lambda _ids: None,
    ) -> dict[str, str]:
        """Submit, then poll until the jobs end or their deadline passes; the jobs cancelled
        while still pending then: kiln name -> squeue's reason (e.g. "Resources").
        `submitted(ids)` runs once they are queued (burn-in opens its window there)."""
        ids = self.submit(specs)
        names = {self.jobs[spec.name]: spec.name for spec in specs}
        self.progress(f"{what}: {len(ids)} Slurm job(s) {_span(ids)}")
        submitted(ids)
        queued = 60 * sum(spec.queued_minutes for spec in specs)
        # Queueing behind running jobs, then run; jobs that queue behind ours on the same nodes
        # (the InfiniBand rounds) add their own limit.
        deadline = self.clock.monotonic() + 2 * limit_minutes * 60 + 60 + queued
        last, started = "", self.clock.monotonic()
        shown = started
        pending: dict[str, str] = {}
        while True:
            text = self.best_effort(commands.squeue(ids))
            states = [line.split("|") for line in text.splitlines() if "|" in line]
            if not states:
                break
            summary, now = _count_states(states), self.clock.monotonic()
            if summary != last or now - shown >= HEARTBEAT_S:  # never silent for long
                self.progress(f"{what}: {summary} ({now - started:.0f}s)")
                last, shown = summary, now
            if self.clock.monotonic() > deadline:
                pending = {
                    names[row[0]]: row[2] if len(row) > 2 else "pending"
                    for row in states
                    if row[0] in names and row[1] == "PENDING"
                }
                self.progress(f"{what}: deadline passed; cancelling {_span(ids)}")
                self.best_effort(commands.scancel(ids))
                break
            self.clock.sleep(self.poll_seconds)
        self.active = [j for j in self.active if j not in ids]
        return pending

    def cancel_active(self) -> None:
        if self.active:
            self.best_effort(commands.scancel(self.active))
            self.active = []


def _span(ids: list[str]) -> str:
    """Job ids for a progress line: all of a few, else the first and last."""
    return ", ".join(ids) if len(ids) <= 6 else f"{ids[0]} ... {ids[-1]}"


def _count_states(states: list[list[str]]) -> str:
    counts: dict[str, int] = {}
    for row in states:
        counts[row[1]] = counts.get(row[1], 0) + 1
    return ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))
