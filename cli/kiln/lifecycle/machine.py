"""Events applied to nodes: each node's state, when it entered it, and its history."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kiln.errors import InvalidInputError
from kiln.lifecycle.states import ALLOWED, State, allowed


class LifecycleError(InvalidInputError):
    """A transition the lifecycle forbids (exit 2): nothing was changed."""


@dataclass(frozen=True, slots=True)
class Event:
    node: str
    at: float  # seconds since the epoch
    to: State
    evidence: str = ""  # a run id, a verdict, a reason: what moved it
    identity_change: bool = False  # its recorded serials changed (back to quarantined)
    inferred: bool = False  # a step the evidence implies was passed, not seen: never timed
    reason: str = ""  # to failed: a word to count failures by (the failing check), not figures


@dataclass(slots=True)
class NodeLife:
    node: str
    state: State
    since: float
    # (state, entered, left or None while in it, the evidence that moved it there)
    history: list[tuple[State, float, float | None, str]] = field(default_factory=list)
    inferred: set[int] = field(default_factory=set)  # indexes of history entered by inference
    failures: list[tuple[float, str]] = field(default_factory=list)  # (when, reason) per failure

    def move(self, event: Event) -> None:
        if event.to not in ALLOWED[self.state] and not allowed(
            self.state, event.to, identity_change=event.identity_change
        ):
            raise refusal(self.node, self.state, event.to)
        state, entered, _, evidence = self.history[-1]
        self.history[-1] = (state, entered, event.at, evidence)
        if event.inferred:
            self.inferred.add(len(self.history))
        self.history.append((event.to, event.at, None, event.evidence))
        self.state, self.since = event.to, event.at
        if event.to is State.FAILED:
            self.failures.append((event.at, event.reason or event.evidence))

    def to_dict(self) -> dict:
        """The node's state and history as JSON: each stay with its times and evidence."""
        return {
            "node": self.node,
            "state": str(self.state),
            "since": self.since,
            "history": [
                {
                    "state": str(state),
                    "entered": entered,
                    "left": left,
                    "evidence": evidence,
                    "inferred": index in self.inferred,
                }  # fmt: skip
                for index, (state, entered, left, evidence) in enumerate(self.history)
            ],
        }


def refusal(node: str, state: State, to: State) -> LifecycleError:
    """The error for a transition the lifecycle forbids, naming both states."""
    return LifecycleError(
        f"{node}: {state} -> {to} is not a transition of the lifecycle",
        hint=f"from {state} a node goes to: {', '.join(sorted(ALLOWED[state]))}",
    )


def replay(events: Iterable[Event], *, in_order: bool = False) -> dict[str, NodeLife]:
    """Every node's life from its events (a node's first is declared), applied in time order;
    `in_order` keeps the order given: a log's, where appends are serialised by the cluster's
    lock and the times are several runners' clocks, which may disagree."""
    lives: dict[str, NodeLife] = {}
    for event in events if in_order else sorted(events, key=lambda e: e.at):
        life = lives.get(event.node)
        if life is None:
            if not allowed(None, event.to):
                raise LifecycleError(
                    f"{event.node}: its first event is {event.to}; a node starts declared",
                    hint="record the node's declaration first",
                )
            lives[event.node] = NodeLife(
                event.node,
                event.to,
                event.at,
                [(event.to, event.at, None, event.evidence)],
                {0} if event.inferred else set(),
            )
        else:
            life.move(event)
    return lives
