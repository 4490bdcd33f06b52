"""Shared helpers of the judging rules."""

from __future__ import annotations

from kiln.judging.verdicts import Action, Severity, Verdict

W, C = Severity.WARNING, Severity.CRITICAL
DRAIN, LOOK = Action.DRAIN, Action.INVESTIGATE


_tuple_new = tuple.__new__


def _new_verdict(*fields) -> Verdict:
    """Verdict(*fields), every field given in order, without NamedTuple's keyword __new__ (a
    node verdict per check and node: 112,500 at 12,500 nodes)."""
    return _tuple_new(Verdict, fields)


_PASSED = Action.NONE


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
    rule: str = "",
) -> Verdict:
    """Verdict("node", name, check, ...) with its node set, built without the frozen __init__."""
    return _new_verdict(
        "node",
        name,
        check,
        passed,
        measured,
        threshold,
        unit,
        severity,
        action if not passed else _PASSED,
        message,
        name,
        rule,
    )
