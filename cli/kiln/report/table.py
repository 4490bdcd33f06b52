"""The terminal report: a rich table, failing verdicts first, then a summary per check."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from kiln.console import folded
from kiln.judging.model import BurninReport
from kiln.judging.verdicts import num
from kiln.report.text import markup_text as escape

STYLE = {"critical": "bold red", "warning": "yellow", "info": "green"}
MAX_PASSING = 60  # passing verdicts listed one by one; more are only counted


def allreduce_summary(report: BurninReport) -> str:
    """Which all-reduce implementation ran, and on which library: "3 run(s): 2 with nccl-tests
    (NCCL 2.18.5+cuda12.2), 1 with torch NCCL 2.21.5" (torch's own NCCL: nccl-tests was not
    built), or "... with gloo" (torch on CPUs)."""
    counts: dict[str, int] = {}
    for a in report.allreduce:
        counts[a.label] = counts.get(a.label, 0) + 1
    parts = [f"{n} with {impl}" for impl, n in sorted(counts.items())]
    return f"{len(report.allreduce)} run(s): " + ", ".join(parts) if parts else "none ran"


def render_table(report: BurninReport, *, show_passing: bool | None = None) -> Group:
    """Renderables for a console; passing rows only for small runs unless asked."""
    failures = report.failures
    passing = [v for v in report.verdicts if v.passed]
    if show_passing is None:
        show_passing = len(passing) <= MAX_PASSING
    drain = report.drain()
    head = Text.from_markup(
        f"[bold]kiln burn-in[/] {escape(report.cluster)} run {escape(report.run_id or '-')}: "
        + (
            "[bold green]PASSED[/]"
            if report.passed
            else f"[bold red]FAILED[/] ({len(failures)} failing verdicts, {len(drain)} node(s) to "
            "drain)"
        )
    )
    table = Table(show_lines=False, header_style="bold", pad_edge=False)
    for column in ("status", "action", "name", "check", "detail"):
        table.add_column(column)
    for v in failures + (passing if show_passing else []):
        if v.passed:
            # an all-reduce verdict's note (no floor, slow pairs not its own) where there is one
            status, detail = Text("ok", style="green"), escape(v.message) if v.rule else ""
            if v.measured is not None and v.threshold is not None:
                detail = f"{num(v.measured)} >= {num(v.threshold)} {escape(v.unit)}".rstrip()
        else:
            status = Text(f"FAIL {v.severity}", style=STYLE[str(v.severity)])
            detail = escape(v.message)
        if v.rule:  # which of the all-reduce floors judged it
            detail = (f"{detail} " + escape(f"[{v.rule}]")).lstrip()
        action = str(v.action) if not v.passed else ""
        table.add_row(status, action, escape(v.name), escape(v.check), detail)
    parts: list = [head, folded(table)]  # a long name folds, never cut
    if report.allreduce:
        parts.append(Text(f"All-reduce: {escape(allreduce_summary(report))}"))
    if report.ib is not None:
        parts.append(Text(f"InfiniBand: {escape(report.ib.summary())}"))
    if not show_passing and passing:
        counts: dict[str, list[int]] = {}
        for v in report.verdicts:
            counts.setdefault(v.check, [0, 0])[0 if v.passed else 1] += 1
        summary = Table(title=f"{len(passing)} passing verdicts, by check", header_style="bold")
        for column in ("check", "passed", "failed"):
            summary.add_column(column)
        for check, (ok, bad) in sorted(counts.items()):
            summary.add_row(escape(check), str(ok), Text(str(bad), style="red" if bad else ""))
        parts.append(folded(summary))
    return Group(*parts)
