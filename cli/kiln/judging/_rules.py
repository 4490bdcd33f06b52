"""Shorthands the judging rules share."""

from __future__ import annotations

from kiln.judging.verdicts import Action, Severity

W, C = Severity.WARNING, Severity.CRITICAL
DRAIN, LOOK = Action.DRAIN, Action.INVESTIGATE
