"""The node lifecycle (#33) as a pure state machine: a generated bring-up of 12,500 nodes over 19
days, with known failure rates, reasons and one slow step, replayed through kiln.lifecycle; the
funnel reproduces the generator's own counts and medians exactly and names the slow step.
Forbidden transitions are errors that name both states."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from datetime import UTC, datetime

import pytest

from kiln.errors import ExitCode
from kiln.lifecycle import Event, LifecycleError, State, funnel, replay
from kiln.lifecycle.funnel import p90

HOUR = 3600.0
T0 = datetime(2026, 11, 1, tzinfo=UTC).timestamp()
NOW = T0 + 19 * 24 * HOUR
# After a failed burn-in: each state, the hours until it, and its evidence.
WAY_BACK = (
    (State.TRIAGE, (2, 12), "triage"),
    (State.RMA, (4, 24), "rma"),
    (State.REPLACED, (48, 120), "new tray"),
    (State.QUARANTINED, (1, 4), "identity changed"),
)
REASONS = {"gemm below floor": 5, "xid 79 (fallen off the bus)": 3, "ib link down": 2}


class Generated:
    """What the generator knows: every event up to NOW and the truth about them."""

    def __init__(self, nodes: int = 12_500, seed: int = 33) -> None:
        rng = random.Random(seed)
        self.events: list[Event] = []
        self.state: dict[str, State] = {}
        self.stays: dict[State, list[float]] = {s: [] for s in (
            State.DECLARED, State.REACHABLE, State.PROVISIONED, State.QUARANTINED,
            State.BURNED_IN)}  # fmt: skip
        self.into_service: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        reasons = [r for r, weight in REASONS.items() for _ in range(weight)]
        for index in range(nodes):
            node = f"gpu{index:05d}"
            rack_day = index // 1000  # racks arrive over 13 days, 1000 nodes a day
            at = T0 + rack_day * 24 * HOUR + rng.uniform(0, 8) * HOUR
            path = [(State.DECLARED, at, "")]
            for state, hours in ((State.REACHABLE, (1, 6)), (State.PROVISIONED, (2, 10)),
                                 (State.QUARANTINED, (1, 3))):  # fmt: skip
                at += rng.uniform(*hours) * HOUR
                path.append((state, at, "run-provision"))
            # The slow step: a burn-in queue of one to three days in quarantine.
            at += rng.uniform(24, 72) * HOUR
            if rng.random() < 0.06:
                path.append((State.FAILED, at, rng.choice(reasons)))
                for state, hours, evidence in WAY_BACK:
                    at += rng.uniform(*hours) * HOUR
                    path.append((state, at, evidence))
                at += rng.uniform(24, 72) * HOUR
            path.append((State.BURNED_IN, at, "burnin-pass"))
            at += rng.uniform(0.1, 1) * HOUR
            path.append((State.IN_SERVICE, at, "resumed"))
            self._record(node, [step for step in path if step[1] <= NOW])

    def _record(self, node: str, path: list[tuple[State, float, str]]) -> None:
        for (state, entered, evidence), nxt in zip(path, [*path[1:], None], strict=True):
            self.events.append(Event(node, entered, state, evidence,
                                     identity_change=evidence == "identity changed"))  # fmt: skip
            if nxt is not None and state in self.stays:
                self.stays[state].append(nxt[1] - entered)
            if state is State.IN_SERVICE:
                self.into_service[datetime.fromtimestamp(entered, UTC).date().isoformat()] += 1
            if state is State.FAILED:
                self.reasons[evidence] += 1
        self.state[node] = path[-1][0]


@pytest.fixture(scope="module")
def generated() -> Generated:
    return Generated()


def test_the_funnel_reproduces_the_generators_counts_and_times(generated):
    lives = replay(reversed(generated.events))  # any order: replayed by time
    report = funnel(lives)
    assert report.nodes == 12_500
    assert report.per_state == {s: Counter(generated.state.values()).get(s, 0) for s in State}
    assert report.into_service_per_day == dict(sorted(generated.into_service.items()))
    for step in report.steps:
        truth = generated.stays[step.state]
        assert step.stays == len(truth)
        assert step.median_s == statistics.median(truth)
        assert step.p90_s == p90(truth)
    assert report.slowest is State.QUARANTINED  # the injected burn-in queue
    assert dict(report.failure_reasons) == dict(generated.reasons)
    assert report.failure_reasons[0][0] == "gemm below floor"  # the most frequent first
    # Some of each: the bring-up is mid-way at NOW (the last racks are still arriving).
    assert report.per_state[State.IN_SERVICE] and report.per_state[State.QUARANTINED]
    assert report.per_state[State.RMA] + report.per_state[State.REPLACED] > 0


def test_since_keeps_the_stays_and_arrivals_of_the_window(generated):
    since = NOW - 3 * 24 * HOUR
    report = funnel(replay(generated.events), since=since)
    assert sum(report.into_service_per_day.values()) == sum(
        1 for e in generated.events if e.to is State.IN_SERVICE and e.at >= since
    )
    assert min(report.into_service_per_day) >= datetime.fromtimestamp(since, UTC).date().isoformat()


def test_a_forbidden_transition_is_an_error_naming_both_states():
    events = [Event("gpu1", 1, State.DECLARED), Event("gpu1", 2, State.REACHABLE),
              Event("gpu1", 3, State.RMA)]  # fmt: skip
    with pytest.raises(LifecycleError) as error:
        replay(events)
    assert error.value.message == "gpu1: reachable -> rma is not a transition of the lifecycle"
    assert error.value.hint == "from reachable a node goes to: failed, provisioned"
    assert error.value.exit_code == ExitCode.INVALID_INPUT
    with pytest.raises(LifecycleError, match="its first event is in_service"):
        replay([Event("gpu2", 1, State.IN_SERVICE)])


def test_a_changed_identity_sends_a_node_in_service_back_to_quarantine():
    steps = [State.DECLARED, State.REACHABLE, State.PROVISIONED, State.QUARANTINED,
             State.BURNED_IN, State.IN_SERVICE]  # fmt: skip
    events = [Event("gpu1", at, state) for at, state in enumerate(steps)]
    with pytest.raises(LifecycleError):  # not without the identity change
        replay([*events, Event("gpu1", 9, State.QUARANTINED, "serials changed")])
    back = replay([*events, Event("gpu1", 9, State.QUARANTINED, "GPU 3 serial changed",
                                  identity_change=True)])  # fmt: skip
    assert back["gpu1"].state is State.QUARANTINED
    assert back["gpu1"].history[-1] == (State.QUARANTINED, 9, None, "GPU 3 serial changed")
