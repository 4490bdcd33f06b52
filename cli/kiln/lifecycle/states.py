"""The states a node passes through, and the transitions between them.

declared -> reachable -> provisioned -> quarantined -> burned_in -> in_service is the bring-up;
failed -> triage -> rma -> replaced -> quarantined the way back. A node whose identity changed
(a replaced GPU, tray or server under the same name) goes back to quarantined from wherever it
is: it is burned in again before it runs jobs.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    DECLARED = "declared"
    REACHABLE = "reachable"
    PROVISIONED = "provisioned"
    QUARANTINED = "quarantined"
    BURNED_IN = "burned_in"
    IN_SERVICE = "in_service"
    FAILED = "failed"
    TRIAGE = "triage"
    RMA = "rma"
    REPLACED = "replaced"


# The bring-up steps in order (the funnel's columns); the way back is not a step of it.
BRING_UP = (
    State.DECLARED,
    State.REACHABLE,
    State.PROVISIONED,
    State.QUARANTINED,
    State.BURNED_IN,
    State.IN_SERVICE,
)

_ANYWHERE_BUT_BACK = frozenset(State) - {State.RMA, State.REPLACED}

ALLOWED: dict[State, frozenset[State]] = {
    State.DECLARED: frozenset({State.REACHABLE, State.FAILED}),
    State.REACHABLE: frozenset({State.PROVISIONED, State.FAILED}),
    State.PROVISIONED: frozenset({State.QUARANTINED, State.FAILED}),
    State.QUARANTINED: frozenset({State.BURNED_IN, State.FAILED}),
    State.BURNED_IN: frozenset({State.IN_SERVICE, State.FAILED}),
    State.IN_SERVICE: frozenset({State.FAILED}),
    State.FAILED: frozenset({State.TRIAGE, State.QUARANTINED}),
    State.TRIAGE: frozenset({State.RMA, State.QUARANTINED}),
    State.RMA: frozenset({State.REPLACED}),
    State.REPLACED: frozenset({State.QUARANTINED}),
}
# An identity change sends a node back to quarantined from any state but the RMA path (there a
# new part is expected: `replaced` says it arrived).
IDENTITY_CHANGE_FROM = _ANYWHERE_BUT_BACK


def allowed(current: State | None, target: State, *, identity_change: bool = False) -> bool:
    """Whether a node in `current` (None: not seen yet) may move to `target`."""
    if current is None:
        return target is State.DECLARED
    if identity_change and target is State.QUARANTINED and current in IDENTITY_CHANGE_FROM:
        return True
    return target in ALLOWED[current]
