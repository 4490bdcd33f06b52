"""The lifecycle events kiln's own evidence implies: a provision run, a judged burn-in, an
operator's triage or RMA. Pure: each function takes the nodes' lives as replayed from the log
and returns the events to append (only transitions the lifecycle allows, in order).

A node kiln has no record of (a cluster brought up before kiln kept a lifecycle, or a record
lost) is caught up to where the evidence shows it: the steps it must have passed are recorded
as `inferred`, at the time of the evidence, and the funnel does not time them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kiln.lifecycle.machine import Event, LifecycleError, NodeLife, refusal
from kiln.lifecycle.states import BRING_UP, IDENTITY_CHANGE_FROM, State, allowed
from kiln.parsers.drain_reason import parse_reason
from kiln.parsers.identity import NEW_NODE  # the slurm stage's reason for a node it never saw


@dataclass(frozen=True, slots=True)
class RunEvidence:
    """What a provision run showed of each compute node."""

    run_id: str
    started: float
    finished: float
    reached: frozenset[str]  # answered in at least one stage
    joined: frozenset[str]  # went through the slurm stage (ok or changed): in Slurm, drained
    quarantined: Mapping[str, str] = field(default_factory=dict)  # node -> why the stage drained


@dataclass(frozen=True, slots=True)
class BurninEvidence:
    run_id: str
    at: float
    passed: frozenset[str]
    failed: Mapping[str, str]  # node -> what failed (its drain reason)
    in_service: frozenset[str]  # runs jobs now: kiln lifted its drain, or it had none
    checks: Mapping[str, str] = field(default_factory=dict)  # node -> its first failing check
    under_drain: Mapping[str, str] = field(default_factory=dict)  # node -> drain tested under


class _Timeline:
    """The events for one node, checked against its state as they are added."""

    def __init__(self, node: str, life: NodeLife | None) -> None:
        self.node = node
        self.state: State | None = life.state if life else None
        self.events: list[Event] = []

    def add(
        self,
        to: State,
        at: float,
        evidence: str,
        *,
        identity_change: bool = False,
        inferred: bool = False,
        reason: str = "",
    ) -> None:
        if self.state is None and to is not State.DECLARED:
            raise LifecycleError(f"{self.node}: its first event is {to}; a node starts declared")
        if not allowed(self.state, to, identity_change=identity_change):
            raise refusal(self.node, self.state, to)  # type: ignore[arg-type]
        self.events.append(Event(self.node, at, to, evidence, identity_change, inferred, reason))
        self.state = to

    def catch_up(self, to: State, at: float, evidence: str) -> None:
        """Record the bring-up steps before `to` the node must have passed (inferred)."""
        if self.state is None:
            self.add(State.DECLARED, at, evidence, inferred=True)
        if self.state in BRING_UP:
            for step in BRING_UP[BRING_UP.index(self.state) + 1 : BRING_UP.index(to)]:
                self.add(step, at, evidence, inferred=True)


def after_run(
    lives: Mapping[str, NodeLife], members: Iterable[str], run: RunEvidence
) -> list[Event]:
    """Declared for a compute node seen for the first time, reachable once it answered,
    provisioned once it joined Slurm, quarantined when the slurm stage drained it as a new node
    (kiln_slurm.quarantine_new_nodes; without it the node stays provisioned until a burn-in
    passes it); a changed identity sends a node back to quarantined (an RMA'd node through
    replaced first)."""
    events: list[Event] = []
    evidence = f"run {run.run_id}"
    for node in sorted(members):
        line = _Timeline(node, lives.get(node))
        if line.state is None:
            line.add(State.DECLARED, run.started, evidence)
        if line.state is State.DECLARED and node in run.reached:
            line.add(State.REACHABLE, run.finished, evidence)
        why = run.quarantined.get(node, "")
        if node in run.joined and line.state is State.REACHABLE:
            line.add(State.PROVISIONED, run.finished, evidence)
        if why == NEW_NODE and line.state is State.PROVISIONED:
            line.add(State.QUARANTINED, run.finished, f"{evidence}: {why}")
        elif why and why != NEW_NODE:  # "hardware changed: gpu_serials"
            if line.state is State.RMA:
                line.add(State.REPLACED, run.finished, f"{evidence}: {why}")
            if line.state in IDENTITY_CHANGE_FROM | {State.REPLACED} and (
                line.state is not State.QUARANTINED
            ):
                line.add(State.QUARANTINED, run.finished, f"{evidence}: {why}",
                         identity_change=line.state is not State.REPLACED)  # fmt: skip
        events.extend(line.events)
    return events


def after_burnin(lives: Mapping[str, NodeLife], burnin: BurninEvidence) -> list[Event]:
    """Failed first when kiln's health check had drained a node it tests; burned in when a
    quarantined node passed, in service when it runs jobs (resumed, or tested without a
    drain); failed, with its reason, when a node failed. A failed node (or one under triage)
    that passes when tested again goes back through quarantined; one that fails again keeps
    its state, and a node with its vendor (RMA) comes back only through replaced."""
    events: list[Event] = []
    for node in sorted(burnin.passed | burnin.failed.keys()):
        line = _Timeline(node, lives.get(node))
        _failed_health_check(line, burnin.under_drain.get(node), burnin.at)
        if node in burnin.failed:
            _failed(line, burnin)
        else:
            _passed(line, burnin)
        events.extend(line.events)
    return events


def _failed(line: _Timeline, burnin: BurninEvidence) -> None:
    if line.state in (State.TRIAGE, State.RMA, State.REPLACED, State.FAILED):
        return  # on the way back already: the operator moves it
    if line.state is None:
        line.add(State.DECLARED, burnin.at, f"burn-in {burnin.run_id}", inferred=True)
    line.add(State.FAILED, burnin.at, f"burn-in {burnin.run_id}: {burnin.failed[line.node]}",
             reason=burnin.checks.get(line.node, ""))  # fmt: skip


def _passed(line: _Timeline, burnin: BurninEvidence) -> None:
    passed = f"burn-in {burnin.run_id} passed"
    if line.state is State.RMA or line.state is State.IN_SERVICE:
        return  # with its vendor (it comes back through replaced), or proven already
    if line.state in (State.FAILED, State.TRIAGE, State.REPLACED):  # tested again
        line.add(State.QUARANTINED, burnin.at, f"burn-in {burnin.run_id}: tested again")
    line.catch_up(State.BURNED_IN, burnin.at, passed)
    if line.state is State.QUARANTINED:
        line.add(State.BURNED_IN, burnin.at, passed)
    if line.node in burnin.in_service:
        line.add(State.IN_SERVICE, burnin.at, f"burn-in {burnin.run_id}: in service")


def _failed_health_check(line: _Timeline, reason: str | None, at: float) -> None:
    """A node tested under a drain kiln's health check placed had failed before the burn-in:
    recorded first (the check's name is the reason counted), unless it is failed already."""
    drained = parse_reason(reason) if reason else None
    if drained is None or drained.kind != "health" or line.state is None:
        return
    if allowed(line.state, State.FAILED):
        check = drained.operation or "check"
        line.add(State.FAILED, at, f"health {check}: {drained.why}", reason=f"health {check}")


# What an operator may mark: triage from failed; RMA from failed (through triage) or triage.
OPERATOR_STATES = (State.TRIAGE, State.RMA)


def by_operator(
    lives: Mapping[str, NodeLife], node: str, to: State, note: str, at: float
) -> list[Event]:
    """`kiln triage` / `kiln rma`: the events, or a LifecycleError (exit 2) naming the node's
    state and what it may go to."""
    if to not in OPERATOR_STATES:
        raise ValueError(f"an operator marks triage or rma, not {to}")
    life = lives.get(node)
    if life is None:
        raise LifecycleError(
            f"{node} has no lifecycle record yet",
            hint="a node enters the lifecycle at its first provision run",
        )
    line = _Timeline(node, life)
    if to is State.RMA and line.state is State.FAILED:
        line.add(State.TRIAGE, at, note)
    line.add(to, at, note)  # a forbidden one raises, naming both states
    return line.events
