"""A node's life from racked to in service, and where a bring-up stands (issue 33).

    lives = replay(events)                     # node -> NodeLife: its state and history
    report = funnel(lives, since=None)         # counts, per-day arrivals, time per state

The lifecycle is a pure state machine over events that carry their evidence (a run id, a
verdict, a reason); a transition the lifecycle forbids is an error naming both states. Nothing
here reads a file or a host.
"""

from __future__ import annotations

from kiln.lifecycle.funnel import Funnel, StepTimes, funnel
from kiln.lifecycle.machine import Event, LifecycleError, NodeLife, replay
from kiln.lifecycle.states import ALLOWED, State

__all__ = [
    "ALLOWED",
    "Event",
    "Funnel",
    "LifecycleError",
    "NodeLife",
    "State",
    "StepTimes",
    "funnel",
    "replay",
]
