"""`kiln funnel --html`: one self-contained page, the funnel's tables and a plot of the nodes in
each lifecycle state over time (inline SVG, nothing from the network)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kiln.lifecycle import Funnel, NodeLife
from kiln.lifecycle.funnel import states_over_time
from kiln.report.html import CSS
from kiln.report.svg import time_plot
from kiln.report.text import html_text as escape


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.1f} h"


def render_html(cluster: str, lives: Mapping[str, NodeLife], report: Funnel) -> str:
    times, series = states_over_time(lives)
    drawn = [(str(state), values) for state, values in series.items() if any(values)]
    states = "".join(
        f"<tr><td>{escape(str(s))}</td><td>{n}</td></tr>" for s, n in report.per_state.items() if n
    )
    steps = "".join(
        f"<tr><td>{escape(str(step.state))}{' (slowest)' if step.state is report.slowest else ''}"
        f"</td><td>{step.stays}</td><td>{_hours(step.median_s)}</td><td>{_hours(step.p90_s)}"
        "</td></tr>"
        for step in report.steps
    )
    reasons = "".join(
        f"<tr><td>{escape(r)}</td><td>{n}</td></tr>" for r, n in report.failure_reasons
    )
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>kiln funnel: {escape(cluster)}</title><style>{CSS}</style></head><body>",
        f"<h1>kiln funnel: {escape(cluster)}</h1>",
        f"<p>{report.nodes} node(s)</p>",
        time_plot(times, drawn, "nodes per lifecycle state", "nodes"),
        f"<h2>Nodes by state</h2><table><tr><th>state</th><th>nodes</th></tr>{states}</table>",
        "<h2>Time in each step</h2><table><tr><th>step</th><th>stays</th><th>median</th>"
        f"<th>p90</th></tr>{steps}</table>",
        f"<h2>Failures</h2><table><tr><th>reason</th><th>count</th></tr>{reasons}</table>",
        "</body></html>",
    ]) + "\n"  # fmt: skip


def write_html(path: Path, cluster: str, lives: Mapping[str, NodeLife], report: Funnel) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_html(cluster, lives, report))
    tmp.replace(path)
