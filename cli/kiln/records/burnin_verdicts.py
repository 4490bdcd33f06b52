"""The last burn-in verdict of each node, from the report.json files in kiln's run records.

Burn-in runs store their judged report as `report.json` (kiln.records.burnin) in a run
directory under kiln's runs home ($KILN_HOME or ./.kiln): `runs/<id>/report.json`,
`runs/<id>/burnin/report.json` or `burnin/<id>/report.json`. The newest report that judged a
node gives its verdict; a node no report judged is "unknown".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kiln.errors import KilnError
from kiln.judging import BurninReport
from kiln.records.burnin import load_report
from kiln.records.runs import runs_home

PATTERNS = ("runs/*/report.json", "runs/*/burnin/report.json", "burnin/*/report.json")
MAX_REPORTS = 50  # newest first; older ones rarely hold a node the newer ones do not


@dataclass(frozen=True, slots=True)
class Verdict:
    verdict: str  # passed | failed | unknown
    run_id: str | None = None
    reason: str | None = None  # the drain reason of a failed node

    def text(self) -> str:
        if self.verdict == "unknown":
            return "unknown"
        run = f" ({self.run_id})" if self.run_id else ""
        return f"{self.verdict}{run}" + (f": {self.reason}" if self.reason else "")

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "run_id": self.run_id, "reason": self.reason}


UNKNOWN = Verdict("unknown")


def _node_verdict(report: BurninReport, node: str) -> Verdict:
    drain = report.drain()
    failed = [v for v in report.failures if v.node == node]
    if node in drain or failed:
        reason = drain.get(node) or failed[0].reason
        return Verdict("failed", report.run_id, reason)
    return Verdict("passed", report.run_id)


def last_verdicts(cluster_name: str, nodes: list[str], home: Path | None = None) -> dict:
    """node -> Verdict for every name in `nodes` (UNKNOWN where no report judged it)."""
    root = home or runs_home()
    found = {path for pattern in PATTERNS for path in root.glob(pattern)}
    newest = sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)[:MAX_REPORTS]
    verdicts = dict.fromkeys(nodes, UNKNOWN)
    pending = set(nodes)
    for path in newest:
        if not pending:
            break
        try:
            report = load_report(path)
        except KilnError:
            continue  # unreadable or another schema: not evidence either way
        if report.cluster != cluster_name:
            continue
        for node in pending & set(report.node_profiles):
            verdicts[node] = _node_verdict(report, node)
        pending -= set(report.node_profiles)
    return verdicts
