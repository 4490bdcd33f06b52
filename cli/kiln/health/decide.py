"""What a health check does to its node in Slurm: drain it, resume it, or leave it alone.

    action = decide(findings, node_drain(scontrol_text, name), auto_resume=False)
    action.verb       # "drain" (with action.reason), "resume" or "none" (action.why says why)

The rule, the only one:
- a failing check drains a node only when it has NO reason yet (in service, or down without
  one); a node already drained, by anyone for anything, keeps its reason and its state;
- a passing check resumes a node only when the inventory turned auto_resume on AND the node is
  drained with a kiln health reason (kind "health" of kiln.parsers.drain_reason) AND this check
  read the check that reason names and it passed; never a node drained for any other reason:
  quarantine, burn-in, maintenance, an operator, or anyone not kiln;
- never the drain of an event check (checks.EVENT_CHECKS: an Xid, IB error counters rising): a
  later quiet window does not disprove it, so it stays until an operator or a passing burn-in
  lifts it;
- a check that could not run (ok None) is neither a failure nor a pass: it drains nothing and
  lifts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.health.checks import EVENT_CHECKS, Finding
from kiln.parsers.drain_reason import format_reason, may_lift, parse_reason


@dataclass(frozen=True)
class Action:
    verb: str  # "drain", "resume" or "none"
    reason: str = ""  # the drain reason of a drain
    why: str = ""  # one line for the log


def health_reason(finding: Finding) -> str:
    """`kiln:health:<check id>: <reading>` for a failing finding."""
    return format_reason("health", finding.check, finding.reading)


def decide(findings: list[Finding], node: dict, *, auto_resume: bool) -> Action:
    """`node`: kiln.parsers.drain_reason.node_drain()'s reading of this node ({}: not in Slurm)."""
    if not node:
        return Action("none", why="the node is not in Slurm: nothing to drain or resume")
    failed = [f for f in findings if f.failed]
    reason = node.get("reason", "")
    parsed = parse_reason(reason)
    if failed:
        if reason:
            return Action("none", why=f"already drained or down with reason {reason!r}: kept")
        return Action("drain", reason=health_reason(failed[0]), why=f"{len(failed)} checks fail")
    if parsed is None or not may_lift(reason, "health"):  # the one drain policy
        return Action("none", why="healthy; no kiln health drain to lift")
    if not auto_resume:
        return Action("none", why="healthy; auto_resume is off, the health drain stays")
    check = parsed.operation or ""
    if check in EVENT_CHECKS:
        return Action(
            "none",
            why=f"healthy; a {check} drain is an event a later check cannot disprove: it stays "
            "until an operator or a passing burn-in lifts it",
        )
    read = [f for f in findings if f.check == check]
    if not read or any(f.unchecked for f in read):
        return Action(
            "none", why=f"healthy; {check or 'the drained check'} was not read: the drain stays"
        )
    if "DRAIN" not in node.get("state", "").upper():
        return Action("none", why="healthy; the node holds a health reason but is not drained")
    return Action("resume", why=f"healthy again; lifting {reason!r}")
