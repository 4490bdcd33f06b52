"""The one drain/resume rule of the health check (kiln.health.decide): a failing check drains only
a node with no reason; a passing one resumes only a kiln health drain, only with auto_resume on;
never a node drained for any other reason."""

from __future__ import annotations

import pytest

from kiln.health.checks import Finding
from kiln.health.decide import decide, health_reason
from kiln.parsers.drain_reason import format_reason, operator_reason, parse_reason

FAIL = [Finding("mount", False, "mount /scratch missing"), Finding("disk", True, "ok")]
PASS = [Finding("mount", True, "1 mounts present")]
HEALTH = "kiln:health:mount: mount /scratch missing"
OTHERS = [
    operator_reason("disk swap", "alice"),
    format_reason("quarantine", "run1", "new node, quarantined until burn-in passes"),
    format_reason("burnin", "run2", "gemm gpu3 612 TFLOPS < floor 700"),
    format_reason("maintenance", "run3", "driver upgrade 550 -> 570"),
    "kiln: gemm gpu3 low",  # an older kiln's burn-in reason
    "Not responding",  # Slurm's own
    "bad DIMM, ticket 4411",  # an operator outside kiln
    "kiln:health is broken, says bob",  # mentions kiln but is not the grammar
]


def node(state: str = "IDLE", reason: str = "") -> dict:
    return {"name": "n1", "state": state, "reason": reason}


def test_the_reason_names_the_check_and_the_reading_in_the_grammar():
    assert health_reason(FAIL[0]) == HEALTH
    parsed = parse_reason(HEALTH)
    assert (parsed.kind, parsed.operation, parsed.why) == (
        "health",
        "mount",
        "mount /scratch missing",
    )


def test_a_failing_check_drains_a_node_in_service():
    action = decide(FAIL, node("ALLOCATED"), auto_resume=False)
    assert (action.verb, action.reason) == ("drain", HEALTH)


@pytest.mark.parametrize("reason", [*OTHERS, HEALTH])
def test_a_failing_check_never_touches_a_node_that_already_has_a_reason(reason):
    assert decide(FAIL, node("IDLE+DRAIN", reason), auto_resume=True).verb == "none"


@pytest.mark.parametrize("reason", OTHERS)
@pytest.mark.parametrize("auto_resume", [True, False])
def test_a_passing_check_never_resumes_a_node_drained_for_another_reason(reason, auto_resume):
    assert decide(PASS, node("IDLE+DRAIN", reason), auto_resume=auto_resume).verb == "none"


def test_a_health_drain_is_resumed_only_with_auto_resume_on():
    assert decide(PASS, node("IDLE+DRAIN", HEALTH), auto_resume=False).verb == "none"
    assert decide(PASS, node("IDLE+DRAIN", HEALTH), auto_resume=True).verb == "resume"
    assert decide(PASS, node("MIXED+DRAIN", HEALTH), auto_resume=True).verb == "resume"
    assert decide(PASS, node("IDLE", HEALTH), auto_resume=True).verb == "none"  # not drained


def test_a_node_slurm_does_not_know_is_left_alone():
    assert decide(FAIL, {}, auto_resume=True).verb == "none"
    assert decide(PASS, node(), auto_resume=True).verb == "none"


# --- issue 27: a drain a later reading cannot disprove stays ------------------------------------

XID_DRAIN = "kiln:health:xid: Xid 79 on PCI 0000:18:00.0: GPU has fallen off the bus."
IB_DRAIN = "kiln:health:ib_errors: mlx5_0 SymbolErrorCounter +4000 in 5.0 min (> 10/min)"
ALL_PASS = [
    Finding("xid", True, "no drain Xid since the last check"),
    Finding("ib_errors", True, "error counters under 10/min"),
    Finding("mount", True, "1 mounts present"),
]


@pytest.mark.parametrize("reason", [XID_DRAIN, IB_DRAIN])
@pytest.mark.parametrize("state", ["IDLE+DRAIN", "MIXED+DRAIN", "DOWN+DRAIN"])
def test_auto_resume_never_lifts_a_drain_for_an_event_a_later_check_cannot_disprove(reason, state):
    """The Xid probe reads only NEW kernel lines and ib_errors only the counters' rise since the
    last check: the next check sees a quiet window whatever the GPU or link is like. Such a
    drain stays until an operator or a passing burn-in lifts it."""
    action = decide(ALL_PASS, node(state, reason), auto_resume=True)
    assert action.verb == "none"
    assert "operator" in action.why and "burn-in" in action.why


def test_a_health_drain_is_lifted_only_when_its_own_check_was_read_and_passed():
    # mount not run this time (skipped, or not in the subset): nothing disproves the drain
    others = [Finding("disk", True, "enough free space")]
    assert decide(others, node("IDLE+DRAIN", HEALTH), auto_resume=True).verb == "none"
    # mount could not be checked: neither a failure nor a pass
    unread = [Finding("mount", None, "probe mount could not check: /proc/mounts unreadable")]
    assert decide(unread, node("IDLE+DRAIN", HEALTH), auto_resume=True).verb == "none"
    # a health reason that names no check cannot be matched to a reading
    nameless = format_reason("health", "", "something failed")
    assert decide(PASS, node("IDLE+DRAIN", nameless), auto_resume=True).verb == "none"
    assert decide(PASS, node("IDLE+DRAIN", HEALTH), auto_resume=True).verb == "resume"


def test_a_check_that_could_not_run_neither_drains_nor_counts_as_failing():
    unchecked = Finding("time_sync", None, "probe time_sync could not check: no clock readable")
    assert unchecked.unchecked and unchecked.to_dict()["ok"] is None
    action = decide([unchecked, *PASS], node("ALLOCATED"), auto_resume=False)
    assert action.verb == "none"
    # and it does not hide a real failure beside it
    action = decide([unchecked, *FAIL], node("ALLOCATED"), auto_resume=False)
    assert (action.verb, action.reason) == ("drain", HEALTH)
