"""Burn-in reports: terminal table (rich), JSON (versioned), JUnit XML and self-contained HTML.

    text = render(report, "html")   # json | junit | html -> str; "table" -> plain text

Rendering only: nothing here judges, prints or writes files (the command does).
"""

from __future__ import annotations

import io
import json

from rich.console import Console

from kiln.judging.model import BurninReport
from kiln.report.html import render_html
from kiln.report.junit import render_junit
from kiln.report.table import render_table

FORMATS = ("table", "json", "junit", "html")

__all__ = ["FORMATS", "render", "render_html", "render_json", "render_junit", "render_table"]


def render_json(report: BurninReport) -> str:
    """The versioned document ("kiln": "burnin-report", "schema_version": 1)."""
    return json.dumps(report.to_dict(), indent=2) + "\n"


def render(report: BurninReport, fmt: str, *, width: int = 160) -> str:
    if fmt == "json":
        return render_json(report)
    if fmt == "junit":
        return render_junit(report)
    if fmt == "html":
        return render_html(report)
    if fmt == "table":
        buffer = io.StringIO()
        Console(file=buffer, width=width, no_color=True, highlight=False).print(
            render_table(report)
        )
        return buffer.getvalue()
    raise ValueError(f"unknown report format {fmt!r}; known: {', '.join(FORMATS)}")
