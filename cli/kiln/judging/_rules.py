"""Shared helpers of the judging rules."""

from __future__ import annotations

from kiln.judging.verdicts import Action, Severity, Verdict

W, C = Severity.WARNING, Severity.CRITICAL
DRAIN, LOOK = Action.DRAIN, Action.INVESTIGATE


def node_verdict(
    name: str,
    check: str,
    passed: bool,
    severity: Severity = Severity.INFO,
    action: Action = Action.NONE,
    message: str = "",
    measured: float | None = None,
    threshold: float | None = None,
    unit: str = "",
) -> Verdict:
    return Verdict(
        "node",
        name,
        check,
        passed,
        measured,
        threshold,
        unit,
        severity,
        action if not passed else Action.NONE,
        message,
        name,
    )
