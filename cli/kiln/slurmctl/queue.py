"""Which jobs hold which nodes: squeue's answer to `commands.jobs_on`, read per node.

    text = ctl.run([commands.jobs_on(names)])[0].stdout
    held = holders(text, names, besides="kiln-burnin-...")   # {node: [Holder(job 4711 ...)]}

One line per job (JOBS_ON_FORMAT): `4711|RUNNING|alice|(null)|gpu[001-004]`, its nodes a Slurm
hostlist. Jobs inside the reservation `besides` (burn-in's own) are left out, and so are nodes
outside `names`: what is left is the nodes other people's work holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kiln.parsers import ParseError
from kiln.render.hostlist import HostlistError, expand

_NONE = {"", "(null)", "none", "n/a"}


@dataclass(frozen=True, slots=True)
class Holder:
    """A job holding nodes: running, completing, suspended (not pending)."""

    job: str
    state: str  # as squeue prints it: RUNNING, COMPLETING, ...
    user: str
    reservation: str | None
    nodes: tuple[str, ...]

    def describe(self) -> str:
        """'job 4711 (alice)', for progress lines and reports."""
        return f"job {self.job} ({self.user})" if self.user else f"job {self.job}"


def parse_jobs_on(text: str) -> list[Holder]:
    """Every job line of a `jobs_on` answer; ParseError on a line that is not one."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) != 5 or not fields[0]:
            raise ParseError(
                "squeue", "expected id|state|user|reservation|nodes", line_no=number, line=line
            )
        job, state, user, reservation, hostlist = (f.strip() for f in fields)
        try:
            nodes = tuple(expand(hostlist)) if hostlist.lower() not in _NONE else ()
        except HostlistError as error:
            raise ParseError("squeue", f"cannot read hostlist {hostlist!r}: {error}") from None
        found.append(
            Holder(job, state, user, None if reservation.lower() in _NONE else reservation, nodes)
        )
    return found


def holders(
    text: str, names: Iterable[str], *, besides: str | None = None
) -> dict[str, list[Holder]]:
    """Node (of `names`, in their order) -> the jobs holding it outside the reservation
    `besides`; nodes no such job holds are left out."""
    wanted = list(names)
    held: dict[str, list[Holder]] = {}
    for job in parse_jobs_on(text):
        if besides is not None and job.reservation == besides:
            continue
        for node in job.nodes:
            held.setdefault(node, []).append(job)
    return {node: held[node] for node in wanted if node in held}
