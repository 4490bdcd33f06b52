"""Where a bring-up stands: nodes per state, nodes entering service per day, how long nodes
spend in each step (median and p90 of the stays that ended), the slowest step, and the
reasons nodes failed, most frequent first. `kiln funnel` renders it."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from kiln.lifecycle.machine import NodeLife
from kiln.lifecycle.states import BRING_UP, State


@dataclass(frozen=True, slots=True)
class StepTimes:
    state: State
    stays: int  # stays in the state that ended (in the window)
    median_s: float | None
    p90_s: float | None


@dataclass(frozen=True, slots=True)
class Funnel:
    nodes: int
    per_state: dict[State, int]  # where each node is now
    into_service_per_day: dict[str, int]  # UTC day -> nodes that entered service that day
    steps: tuple[StepTimes, ...]  # the bring-up steps before in_service, in order
    slowest: State | None  # the step with the longest median stay
    failure_reasons: tuple[tuple[str, int], ...]  # most frequent first

    def to_dict(self) -> dict:
        return {
            "nodes": self.nodes,
            "per_state": {str(state): count for state, count in self.per_state.items()},
            "into_service_per_day": self.into_service_per_day,
            "steps": [
                {"state": str(s.state), "stays": s.stays, "median_s": s.median_s, "p90_s": s.p90_s}
                for s in self.steps
            ],
            "slowest": None if self.slowest is None else str(self.slowest),
            "failure_reasons": [{"reason": r, "count": c} for r, c in self.failure_reasons],
        }


def p90(values: list[float]) -> float:
    """The nearest-rank 90th percentile (a value that occurred)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def _day(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).date().isoformat()


def funnel(lives: Mapping[str, NodeLife], since: float | None = None, top: int = 10) -> Funnel:
    """The funnel of `lives`; with `since`, only stays that ended and arrivals at or after it
    (the nodes per state are always where they are now)."""
    start = since if since is not None else -math.inf
    per_state = Counter(life.state for life in lives.values())
    stays: dict[State, list[float]] = {state: [] for state in BRING_UP[:-1]}
    arrivals: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for life in lives.values():
        for index, (state, entered, left, _evidence) in enumerate(life.history):
            if index in life.inferred:
                continue  # a step the evidence implies, never seen: no time, no arrival
            if state in stays and left is not None and left >= start:
                stays[state].append(left - entered)
            if entered >= start and state is State.IN_SERVICE:
                arrivals[_day(entered)] += 1
        for at, reason in life.failures:
            if at >= start:
                reasons[reason or "no reason recorded"] += 1
    steps = tuple(
        StepTimes(
            state,
            len(values),
            statistics.median(values) if values else None,
            p90(values) if values else None,
        )
        for state, values in stays.items()
    )
    timed = [step for step in steps if step.median_s is not None]
    slowest = max(timed, key=lambda step: step.median_s or 0.0).state if timed else None
    return Funnel(
        nodes=len(lives),
        per_state={state: per_state.get(state, 0) for state in State},
        into_service_per_day=dict(sorted(arrivals.items())),
        steps=steps,
        slowest=slowest,
        failure_reasons=tuple(sorted(reasons.items(), key=lambda item: (-item[1], item[0]))[:top]),
    )


def states_over_time(
    lives: Mapping[str, NodeLife], points: int = 120
) -> tuple[list[float], dict[State, list[int]]]:
    """Nodes in each state at `points` evenly spaced times from the first event to the last:
    the times, and per state its count at each (a plot of the bring-up's progress)."""
    changes: list[tuple[float, State | None, State]] = []  # (when, left, entered)
    for life in lives.values():
        previous: State | None = None
        for state, entered, _left, _evidence in life.history:
            changes.append((entered, previous, state))
            previous = state
    if not changes:
        return [], {state: [] for state in State}
    changes.sort(key=lambda change: change[0])
    first, last = changes[0][0], changes[-1][0]
    times = [first + (last - first) * i / max(1, points - 1) for i in range(points)]
    counts: Counter[State] = Counter()
    series: dict[State, list[int]] = {state: [] for state in State}
    index = 0
    for at in times:
        while index < len(changes) and changes[index][0] <= at:
            _, left, entered = changes[index]
            if left is not None:
                counts[left] -= 1
            counts[entered] += 1
            index += 1
        for state in State:
            series[state].append(counts[state])
    return times, series
