"""Burn-in runs that never finished: their reservations and jobs, read from Slurm and undone.

    left = leftover_runs(ctl)       # [Leftover]: kiln-burnin-* reservations and their jobs
    undo(ctl, left)                 # waits for a window still open, cancels the jobs, deletes

A burn-in run holds its nodes in a reservation named RESERVATION_PREFIX + run id. A run that was
killed (SIGKILL, a lost runner, a reboot) leaves the reservation and its jobs until their time
runs out. Its nodes are safe meanwhile: every quarantine drain it lifted was put back by the
window program on the controller (kiln.slurmctl.cas), and a node it had not judged was never
resumed. What is left is clutter that holds nodes out of service: `kiln status` names it and the
next `kiln burnin` (which holds the cluster's lock, so no other run is live) undoes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.parsers import ParseError
from kiln.parsers.slurm_reservation import parse_reservations
from kiln.slurmctl import commands
from kiln.slurmctl.cas import WINDOW_LOCK
from kiln.slurmctl.remote import Controller

RESERVATION_PREFIX = "kiln-burnin-"
WINDOW_WAIT_S = 300  # a window lasts at most its wait and a few Slurm commands


@dataclass(slots=True)
class Leftover:
    reservation: str
    nodes: str  # hostlist
    end: str | None
    jobs: list[str] = field(default_factory=list)

    def describe(self) -> str:
        jobs = f", {len(self.jobs)} job(s) {' '.join(self.jobs[:6])}" if self.jobs else ""
        until = f" until {self.end}" if self.end else ""
        return f"reservation {self.reservation} on {self.nodes or 'no node'}{until}{jobs}"

    def to_dict(self) -> dict:
        return {"reservation": self.reservation, "nodes": self.nodes, "end": self.end,
                "jobs": self.jobs}  # fmt: skip


def read_leftovers(reservations: str, jobs: str) -> list[Leftover]:
    """Leftovers from `scontrol -o show reservation` and `squeue` (commands.jobs_by_reservation)."""
    try:
        found = parse_reservations(reservations)
    except ParseError:
        return []
    left = {
        r.name: Leftover(r.name, r.nodes, r.end)
        for r in found
        if r.name.startswith(RESERVATION_PREFIX)
    }
    for line in jobs.splitlines():
        job, _, reservation = line.strip().partition("|")
        if reservation in left:
            left[reservation].jobs.append(job)
    return list(left.values())


def leftover_runs(ctl: Controller) -> list[Leftover]:
    """kiln burn-in reservations still in Slurm, with the jobs in them."""
    shown, queued = ctl.run(
        [commands.show_reservations(), commands.jobs_by_reservation()], check=False
    )
    return read_leftovers(shown.stdout, queued.stdout)


def undo(ctl: Controller, left: list[Leftover]) -> None:
    """Wait for a window still open (its program puts the drains back), then cancel each
    leftover's jobs and delete its reservation."""
    if not left:
        return
    steps = [["flock", "-w", str(WINDOW_WAIT_S), WINDOW_LOCK, "true"]]
    for leftover in left:
        steps += [
            ["scancel", f"--reservation={leftover.reservation}"],
            commands.delete_reservation(leftover.reservation),
        ]
    ctl.run(steps, check=False)
