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


@dataclass(slots=True)
class NodeLife:
    node: str
    state: State
    since: float
    # (state, entered, left or None while in it, the evidence that moved it there)
    history: list[tuple[State, float, float | None, str]] = field(default_factory=list)

    def move(self, event: Event) -> None:
        if not allowed(self.state, event.to, identity_change=event.identity_change):
            raise LifecycleError(
                f"{self.node}: {self.state} -> {event.to} is not a transition of the lifecycle",
                hint=f"from {self.state} a node goes to: {_next(self.state)}",
            )
        state, entered, _, evidence = self.history[-1]
        self.history[-1] = (state, entered, event.at, evidence)
        self.history.append((event.to, event.at, None, event.evidence))
        self.state, self.since = event.to, event.at


def _next(state: State) -> str:
    return ", ".join(sorted(ALLOWED[state]))


def replay(events: Iterable[Event]) -> dict[str, NodeLife]:
    """Every node's life from its events, applied in time order (a node's first is declared)."""
    lives: dict[str, NodeLife] = {}
    for event in sorted(events, key=lambda e: e.at):
        life = lives.get(event.node)
        if life is None:
            if not allowed(None, event.to):
                raise LifecycleError(
                    f"{event.node}: its first event is {event.to}; a node starts declared",
                    hint="record the node's declaration first",
                )
            lives[event.node] = NodeLife(
                event.node, event.to, event.at, [(event.to, event.at, None, event.evidence)]
            )
        else:
            life.move(event)
    return lives
