"""What a burn-in does to its nodes' Slurm states: a window per phase, one settlement at the end.

    lift_while_starting(ctl, drained, names, ids, outcome, progress)  # after a phase is queued
    settle(ctl, drained, outcome, progress)                            # after judging

`drained` maps each node tested under a drain (a quarantine, a failed burn-in or health check:
what the drain policy lets burn-in lift) to that reason. A phase's jobs wait in the queue for
those nodes; the window (kiln.slurmctl.cas.open_window) lifts their drains until the jobs start
and puts them back, so at no moment outside a window is such a node schedulable, and a window
ends on the controller even when kiln does not. The settlement changes a node only where it
still holds the reason it was tested under: failing nodes get kind burnin and the run's id,
passing ones are resumed, one not tested keeps its drain, and a reason someone else placed
during the run (an operator, the health check) is kept and reported.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from kiln.errors import OperationFailed
from kiln.parsers.drain_reason import format_reason, parse_reason
from kiln.slurmctl.cas import Change, compare_and_set, open_window
from kiln.slurmctl.remote import Controller

WINDOW_SECONDS = 60  # how long a drain is lifted at most while a phase's jobs start


def burnin_reason(run_id: str, reported: str) -> str:
    """The drain a failing node gets: kind burnin, this run's id, the report's why."""
    parsed = parse_reason(reported)
    return format_reason("burnin", run_id, parsed.why if parsed else reported)


def lift_while_starting(
    ctl: Controller,
    drained: dict[str, str],
    names: Collection[str],
    ids: list[str],
    outcome,  # kiln.burnin.campaign.BurninOutcome
    progress: Callable[[str], None],
) -> None:
    """Lift the drains of the phase's nodes while its jobs `ids` start. A node someone else
    drained meanwhile keeps their drain: it leaves `drained` (its jobs wait to their deadline,
    and it is not tested). A drain that could not be put back stops the run."""
    drains = {n: r for n, r in drained.items() if n in names}
    if not drains:
        return
    found_all = open_window(ctl, drains, ids, wait_seconds=WINDOW_SECONDS)
    restored = sum(found.result == "restored" for found in found_all)
    progress(f"{restored} drained node(s) lifted while their jobs started, drained again")
    for found in found_all:
        if found.result == "kept":
            progress(f"{found.node}: drained by someone else ({found.now}): kept")
            drained.pop(found.node, None)
            outcome.kept[found.node] = found.now
        elif found.result == "unlifted":  # still drained: its jobs wait to their deadline
            progress(f"{found.node}: its drain could not be lifted ({found.now}): not tested")
        elif found.result != "restored":
            raise OperationFailed(
                f"{found.node}: its drain could not be put back after its jobs started "
                f"({found.now or found.result})",
                hint=f"drain it by hand: scontrol update nodename={found.node} state=drain",
            )


def settle(
    ctl: Controller,
    drained: dict[str, str],
    outcome,  # kiln.burnin.campaign.BurninOutcome
    progress: Callable[[str], None],
) -> None:
    """Drain what failed, resume what passed under a drain burn-in may lift; every change a
    compare-and-set against the reason the node was tested under (or: not drained)."""
    failing = {
        node: burnin_reason(outcome.run_id, why) for node, why in outcome.report.drain().items()
    }
    changes = []
    for node in outcome.nodes:
        was = drained.get(node)
        if node in outcome.kept:
            continue  # someone else's drain now: theirs to lift
        if node in failing:
            changes.append(Change(node, was, failing[node]))
        elif was is not None and node not in outcome.not_tested:
            changes.append(Change(node, was, None))
    for found in compare_and_set(ctl, changes):
        node = found.node
        if found.result == "applied" and node in failing:
            outcome.drained[node] = failing[node]
        elif found.result == "applied":
            outcome.resumed.append(node)
        elif found.result == "kept":
            progress(f"{node}: changed by someone else during the run ({found.now}): kept")
            outcome.kept[node] = found.now
        else:
            progress(f"{node}: its state could not be set: {found.now}")
