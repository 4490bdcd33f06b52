"""The HTML report: one self-contained file that opens in a browser with no network.

Failing items first, then three inline SVG plots (kiln.report.svg): TFLOPS per GPU across the
fleet with the floors, all-reduce busbw against message size, and the pairwise heat map. Large
fleets are thinned for drawing only (every failing GPU and node is always drawn). Then
InfiniBand: a summary, ib_write_bw per pair and rail against the floors (a fourth plot, when
anything was measured), the slowest measurements and the error counters that rose.
"""

from __future__ import annotations

from kiln.judging.model import BurninReport
from kiln.judging.verdicts import num
from kiln.report.svg import heat_map, line_plot, strip_plot
from kiln.report.table import allreduce_summary
from kiln.report.text import html_text as escape

MAX_POINTS = 5000  # passing GPUs drawn in the strip plot
MAX_LINES = 16  # curves in the busbw plot
MAX_HEAT = 48  # nodes in the heat map
MAX_IB_ROWS = 40  # rail measurements listed, slowest first

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #ddd}
th{text-align:left;background:#f4f4f4}.fail{color:#b00}.ok{color:#080}
.critical{font-weight:bold;color:#b00}.warning{color:#b60}
svg{font-size:11px;fill:#333;display:block;margin:8px 0}svg .title{font-size:14px}
.note{color:#666;font-size:12px}
"""


def _failing_gpus(report: BurninReport) -> set[str]:
    failed = set()
    for v in report.failures:
        if v.subject == "gpu":
            failed.add(v.name)
    return failed


def tflops_plot(report: BurninReport) -> str:
    failed_gpus = _failing_gpus(report)
    points = []
    for node in sorted(report.gpu_tflops):
        for i, value in enumerate(report.gpu_tflops[node]):
            label = "gpu" if report.node_profiles.get(node) != "none" else "cpu"
            name = f"{node}/{label}{i}"
            points.append((name, value, name in failed_gpus))
    passing = [p for p in points if not p[2]]
    if len(passing) > MAX_POINTS:
        stride = len(passing) / MAX_POINTS
        keep = {passing[int(k * stride)][0] for k in range(MAX_POINTS)}
        points = [p for p in points if p[2] or p[0] in keep]
    profiles = set(report.node_profiles.values())
    floors = {p: f.gemm_tflops for p, f in report.floors.items() if p in profiles}
    return strip_plot(points, floors, "GEMM TFLOPS per GPU across the fleet", "TFLOPS")


def busbw_plot(report: BurninReport) -> str:
    """Multi-node jobs, then the slowest in-node and pair runs; red where that run failed."""
    bad_jobs = {v.name for v in report.failures if v.subject == "job"}
    bad_nodes = {
        v.node for v in report.failures if v.check in ("allreduce_node", "allreduce_correct")
    }
    slow = report.pair_threshold_gbs or 0.0
    order = {"fabric": 0, "node": 1, "pair": 2}
    chosen = sorted(report.allreduce, key=lambda a: (order[a.scope], a.verdict_busbw_gbs))

    def failed(a) -> bool:
        if a.scope == "node":
            return a.hosts[0] in bad_nodes
        if a.scope == "pair":
            return a.verdict_busbw_gbs < slow
        return a.job in bad_jobs

    series = [
        (a.job, [(r.bytes, r.busbw_gbs) for r in a.rows], failed(a)) for a in chosen[:MAX_LINES]
    ]
    floors = [f.allreduce_busbw_gbs for f in report.floors.values() if f.allreduce_busbw_gbs]
    floor = min(floors) if floors else None
    title = "All-reduce bus bandwidth against message size (line: the intra-node floor)"
    return line_plot(series, floor, title, "GB/s")


def pair_plot(report: BurninReport) -> str:
    pairs = {
        tuple(sorted(a.hosts)): a.verdict_busbw_gbs for a in report.allreduce if a.scope == "pair"
    }
    threshold = report.pair_threshold_gbs or 0.0
    suspects = {n for pair, v in pairs.items() if v < threshold for n in pair}
    nodes = sorted({n for pair in pairs for n in pair}, key=lambda n: (n not in suspects, n))
    labels = sorted(nodes[:MAX_HEAT])
    index = {name: i for i, name in enumerate(labels)}
    cells = {(index[a], index[b]): v for (a, b), v in pairs.items() if a in index and b in index}
    title = f"Pairwise all-reduce busbw, GB/s (slow below {num(threshold)})"
    if len(nodes) > MAX_HEAT:
        title += f": {MAX_HEAT} of {len(nodes)} nodes, suspects first"
    return heat_map(labels, cells, threshold, title)


def ib_plot(report: BurninReport) -> str:
    links = report.ib.links if report.ib else []
    points = [
        (f"{v.client}->{v.server} rail{v.rail}", v.measured_gbps, not v.passed)
        for v in sorted(links, key=lambda v: (v.rail, v.client))
    ]
    passing = [p for p in points if not p[2]]
    if len(passing) > MAX_POINTS:
        stride = len(passing) / MAX_POINTS
        keep = {passing[int(k * stride)][0] for k in range(MAX_POINTS)}
        points = [p for p in points if p[2] or p[0] in keep]
    floors = {f"{v.link_rate_gbps:g} Gb/s links": v.floor_gbps for v in links}
    return strip_plot(points, floors, "ib_write_bw per node pair and rail", "Gb/s")


def _ib_section(report: BurninReport) -> list[str]:
    ib = report.ib
    if ib is None:
        return []
    parts = ["<h2>InfiniBand</h2>", f"<p>{escape(ib.summary())}</p>"]
    if ib.links:
        parts.append(ib_plot(report))
        rows = "".join(
            f'<tr><td class="{"ok" if v.passed else "fail"}">{"ok" if v.passed else "FAIL"}</td>'
            f"<td>{v.rail}</td><td>{escape(v.client)} {escape(v.hca or '?')}</td>"
            f"<td>{escape(v.server)} {escape(v.peer_hca or '?')}</td>"
            f"<td>{num(v.measured_gbps)}</td><td>{num(v.floor_gbps)}</td>"
            f"<td>{num(v.link_rate_gbps)}</td></tr>"
            for v in sorted(ib.links, key=lambda v: v.measured_gbps / v.floor_gbps)[:MAX_IB_ROWS]
        )
        head = "".join(
            f"<th>{h}</th>"
            for h in ("", "rail", "client HCA", "server HCA", "Gb/s", "floor", "line rate")
        )
        more = len(ib.links) - MAX_IB_ROWS
        parts.append(f'<table class="ib"><tr>{head}</tr>{rows}</table>')
        if more > 0:
            parts.append(f'<p class="note">{more} more measurement(s) in report.json</p>')
    if ib.counter_rises:
        rows = "".join(
            f"<tr><td>{escape(node)}</td><td>{escape(hca)}</td><td>{ib.port}</td>"
            f"<td>{escape(', '.join(f'{k} +{d}' for k, d in sorted(rose.items())))}</td></tr>"
            for node, hcas in sorted(ib.counter_rises.items())
            for hca, rose in sorted(hcas.items())
        )
        parts.append(
            "<h3>Error counters that rose during burn-in</h3><table><tr><th>node</th>"
            f"<th>HCA</th><th>port</th><th>counters</th></tr>{rows}</table>"
        )
    return parts


def _failures_table(report: BurninReport) -> str:
    rows = []
    for v in report.failures:
        rows.append(
            f'<tr><td class="{v.severity}">{v.severity}</td><td>{v.action}</td>'
            f"<td>{escape(v.subject)}</td><td>{escape(v.name)}</td><td>{escape(v.check)}</td>"
            f"<td>{num(v.measured)}</td><td>{num(v.threshold)}</td><td>{escape(v.unit)}</td>"
            f"<td>{escape(v.rule)}</td><td>{escape(v.message)}</td></tr>"
        )
    if not rows:
        return '<p class="ok">Every check passed.</p>'
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "severity",
            "action",
            "subject",
            "name",
            "check",
            "measured",
            "threshold",
            "unit",
            "rule",
            "message",
        )
    )
    return f'<table class="failures"><tr>{head}</tr>{"".join(rows)}</table>'


def render_html(report: BurninReport) -> str:
    drain = report.drain()
    status = "PASSED" if report.passed else f"FAILED: {len(drain)} node(s) to drain"
    gpus = sum(len(t) for t in report.gpu_tflops.values())
    drain_rows = "".join(
        f"<tr><td>{escape(n)}</td><td>{escape(r)}</td></tr>" for n, r in sorted(drain.items())
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>kiln burn-in: {escape(report.cluster)} {escape(report.run_id or '')}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>kiln burn-in: {escape(report.cluster)}</h1>",
        f'<p class="{"ok" if report.passed else "fail"}"><b>{status}</b> &middot; run '
        f"{escape(report.run_id or '-')} &middot; suite {escape(report.suite or '-')} &middot; "
        f"{len(report.node_profiles)} nodes, {gpus} devices, {len(report.failures)} failing "
        f"of {len(report.verdicts)} verdicts</p>",
        "<h2>Failing</h2>",
        _failures_table(report),
    ]
    if drain_rows:
        parts += [
            "<h2>Nodes to drain</h2>",
            f"<table><tr><th>node</th><th>Slurm reason</th></tr>{drain_rows}</table>",
        ]
    parts += [
        "<h2>GEMM throughput</h2>",
        tflops_plot(report),
        "<h2>All-reduce bandwidth</h2>",
        f"<p>{escape(allreduce_summary(report))}</p>",
        busbw_plot(report),
        "<h2>Pairwise all-reduce</h2>",
        pair_plot(report),
        *_ib_section(report),
        '<p class="note">Generated by kiln; hover a point for its value.</p>',
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
