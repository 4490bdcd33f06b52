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
