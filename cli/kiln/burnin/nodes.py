"""Which nodes a burn-in tests: the selected compute nodes, as far as Slurm lets them run.

A node drained by a quarantine (new or changed), a failed burn-in or a failed health check (the
kinds the drain policy lets burn-in lift: kiln.parsers.drain_reason.POLICY) is tested under its
drain, and resumed if it passes; a node drained for any other reason (an operator's `kiln drain`,
a maintenance in progress, anyone else's drain), down or not responding is skipped and left
alone.
A node that jobs outside the reservation hold (`busy`) is not tested: reported "not tested
(busy)", never drained; `wait_for` polls until such nodes are free, up to a timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kiln.errors import InvalidInputError
from kiln.fleet import select_nodes
from kiln.inventory import Cluster, Node
from kiln.judging.model import NOT_TESTED_BUSY
from kiln.parsers.drain_reason import kinds_lifted_by
from kiln.slurmctl import commands
from kiln.slurmctl.queue import Holder, holders
from kiln.slurmctl.state import NodeState

Busy = dict[str, list[Holder]]  # node -> the jobs holding it outside the reservation
SHOWN = 8  # busy nodes named in one progress line

_UNUSABLE = ("down", "future", "unknown")
RETESTED = kinds_lifted_by("burnin")  # the drains burn-in tests under, and lifts on a pass


def select_compute(cluster: Cluster, selector: str | None) -> list[Node]:
    compute = {node.name for node in cluster.compute}
    chosen = [n for n in select_nodes(cluster, selector) if n.name in compute]
    if not chosen:
        raise InvalidInputError(
            f"--nodes {selector!r} selects no compute node" if selector else "no compute nodes"
        )
    return chosen


def classify(
    states: Mapping[str, NodeState], wanted: list[str]
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(nodes to test, {node drained by a quarantine or burn-in: its reason}, {skipped: why})."""
    usable: list[str] = []
    kiln_drained: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name in wanted:
        node = states.get(name)
        if node is None:
            skipped[name] = "not known to Slurm"
        elif node.drain_kind in RETESTED:
            kiln_drained[name] = node.reason or ""
            usable.append(name)
        elif node.drained:
            whose = f"a kiln {node.drain_kind} drain" if node.drain_kind else "someone else"
            skipped[name] = f"drained by {whose} ({node.reason or 'no reason'})"
        elif node.base in _UNUSABLE or not node.responding:
            skipped[name] = f"Slurm state {node.base.upper()}"
        else:
            usable.append(name)
    return usable, kiln_drained, skipped


def busy(ctl: Any, names: Sequence[str], reservation: str) -> Busy:
    """The nodes of `names` that jobs outside `reservation` hold (running, completing, ...)."""
    if not names:
        return {}
    (step,) = ctl.run([commands.jobs_on(names)])
    return holders(step.stdout, names, besides=reservation)


def busy_message(jobs: Sequence[Holder]) -> str:
    """'not tested (busy): job 4711 (alice) runs on it outside the reservation'."""
    verb = "runs" if len(jobs) == 1 else "run"
    held_by = ", ".join(j.describe() for j in jobs)
    return f"{NOT_TESTED_BUSY}: {held_by} {verb} on it outside the reservation"


def describe(held: Busy) -> str:
    """'kiln-node02 (job 4711 (alice)), ...', the first SHOWN nodes and a count of the others."""
    parts = [f"{n} ({', '.join(j.describe() for j in jobs)})" for n, jobs in held.items()]
    more = f" and {len(parts) - SHOWN} more" if len(parts) > SHOWN else ""
    return ", ".join(parts[:SHOWN]) + more


def wait_for(
    ctl: Any,
    held: Busy,
    reservation: str,
    *,
    minutes: float,
    poll_seconds: float,
    progress: Callable[[str], None],
    clock: Any,
) -> Busy:
    """Poll the busy nodes until no job outside the reservation holds them or `minutes` pass;
    the nodes still busy then. `clock` has monotonic() and sleep() (the time module)."""
    deadline = clock.monotonic() + minutes * 60
    said, said_at = "", clock.monotonic()
    while held:
        now = clock.monotonic()
        left = deadline - now
        if left <= 0:
            progress(f"gave up waiting after {minutes:g} min; still busy: {describe(held)}")
            break
        text = describe(held)
        if text != said or now - said_at >= 10:  # on a change, else every 10 s (never silent)
            progress(f"waiting for {len(held)} busy node(s), {left / 60:.0f} min left: {text}")
            said, said_at = text, now
        clock.sleep(poll_seconds)
        held = busy(ctl, list(held), reservation)
    return held
