"""Inline SVG plots, drawn here in Python: no JavaScript, no fonts or files from the network.

Each function returns one `<svg>` element as text. Data points carry `class` and `data-*`
attributes and a `<title>` (the browser's own tooltip), so tests and people can read them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kiln.report.text import html_text as escape

W, H = 1080, 360
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 30, 50
PASS, FAIL, FLOOR, GRID = "#4c78a8", "#d62728", "#ff7f0e", "#e5e5e5"
PALETTE = ("#4c78a8", "#54a24b", "#b279a2", "#9d755d", "#72b7b2", "#eeca3b", "#bab0ac")


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if raw <= m * step)
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 2)]


def _fmt(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.3g}"


def size_label(size: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g}{unit}"
    return f"{size}B"


@dataclass
class Frame:
    """A plot area: data ranges mapped to pixels (x optionally log2)."""

    x0: float
    x1: float
    y0: float
    y1: float
    log_x: bool = False

    def x(self, value: float) -> float:
        a, b, v = self.x0, self.x1, value
        if self.log_x:
            a, b, v = math.log2(a), math.log2(b), math.log2(value)
        return LEFT + (v - a) / ((b - a) or 1) * (W - LEFT - RIGHT)

    def y(self, value: float) -> float:
        return H - BOTTOM - (value - self.y0) / ((self.y1 - self.y0) or 1) * (H - TOP - BOTTOM)


def _open(kind: str, title: str, x_label: str, y_label: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot plot-{kind}" '
        f'viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="{LEFT}" y="18" class="title">{escape(title)}</text>',
        f'<text x="{(W + LEFT) / 2}" y="{H - 8}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" text-anchor="middle">'
        f"{escape(y_label)}</text>",
    ]


def _y_axis(frame: Frame, ticks: Sequence[float]) -> list[str]:
    out = []
    for t in ticks:
        if frame.y0 <= t <= frame.y1:
            y = frame.y(t)
            out.append(
                f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>'
                f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
            )
    return out


def strip_plot(
    points: Sequence[tuple[str, float, bool]], floors: dict[str, float], title: str, unit: str
) -> str:
    """One point per (name, value, failed) along x in the given order; dashed floor lines."""
    values = [v for _, v, _ in points] + list(floors.values())
    ticks = nice_ticks(0.0, max(values, default=1.0) * 1.05)
    frame = Frame(0, max(len(points) - 1, 1), 0.0, ticks[-1])
    out = _open("strip", title, f"GPUs across the fleet ({len(points)} shown)", unit)
    out += _y_axis(frame, ticks)
    for label, floor in floors.items():
        y = frame.y(floor)
        out.append(
            f'<line class="floor" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="{FLOOR}" stroke-dasharray="6 4"/><text x="{W - RIGHT}" y="{y - 4:.1f}" '
            f'text-anchor="end" fill="{FLOOR}">{escape(label)} floor {_fmt(floor)}</text>'
        )
    for i, (name, value, failed) in enumerate(points):
        colour, r = (FAIL, 4) if failed else (PASS, 2.2)
        out.append(
            f'<circle class="pt{" fail" if failed else ""}" data-name="{escape(name)}" '
            f'data-v="{value:g}" cx="{frame.x(i):.1f}" cy="{frame.y(value):.1f}" r="{r}" '
            f'fill="{colour}"><title>{escape(name)}: {_fmt(value)} {unit}</title></circle>'
        )
    return "\n".join([*out, "</svg>"])


def line_plot(
    series: Sequence[tuple[str, Sequence[tuple[int, float]], bool]],
    floor: float | None,
    title: str,
    unit: str,
) -> str:
    """Lines of (size bytes, value) on a log2 x axis; failing series drawn in red."""
    xs = [x for _, pts, _ in series for x, _ in pts] or [1, 2]
    ys = [y for _, pts, _ in series for _, y in pts] + ([floor] if floor else [])
    ticks = nice_ticks(0.0, max(ys, default=1.0) * 1.05)
    frame = Frame(min(xs), max(max(xs), min(xs) * 2), 0.0, ticks[-1], log_x=True)
    out = _open("lines", title, "message size (bytes, log scale)", unit)
    rows = math.ceil(len(series) / 4)
    out[0] = out[0].replace(f'viewBox="0 0 {W} {H}"', f'viewBox="0 0 {W} {H + 18 * rows}"')
    out[0] = out[0].replace(f'height="{H}"', f'height="{H + 18 * rows}"')
    out += _y_axis(frame, ticks)
    size = 1 << max(0, math.ceil(math.log2(frame.x0)))
    step = max(1, round(math.log2(frame.x1 / frame.x0) / 10))
    while size <= frame.x1:
        x = frame.x(size)
        out.append(
            f'<text x="{x:.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{size_label(size)}'
            "</text>"
        )
        size <<= step
    if floor:
        y = frame.y(floor)
        out.append(
            f'<line class="floor" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="{FLOOR}" stroke-dasharray="6 4"/><text x="{W - RIGHT}" y="{y - 4:.1f}" '
            f'text-anchor="end" fill="{FLOOR}">floor {_fmt(floor)}</text>'
        )
    for k, (name, pts, failed) in enumerate(series):
        colour = FAIL if failed else PALETTE[k % len(PALETTE)]
        coords = " ".join(f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in pts)
        out.append(
            f'<g class="series" data-name="{escape(name)}"><polyline points="{coords}" '
            f'fill="none" stroke="{colour}" stroke-width="1.6"/>'
        )
        for x, y in pts:
            out.append(
                f'<circle class="pt" data-x="{x}" data-v="{y:g}" cx="{frame.x(x):.1f}" '
                f'cy="{frame.y(y):.1f}" r="2.5" fill="{colour}"><title>{escape(name)} '
                f"{size_label(x)}: {_fmt(y)} {unit}</title></circle>"
            )
        lx, ly = LEFT + (k % 4) * 250, H + 12 + (k // 4) * 18
        out.append(
            f'<rect x="{lx}" y="{ly - 9}" width="12" height="10" fill="{colour}"/>'
            f'<text x="{lx + 16}" y="{ly}" class="legend">{escape(name)}</text></g>'
        )
    return "\n".join([*out, "</svg>"])


def heat_map(
    labels: Sequence[str], cells: dict[tuple[int, int], float], threshold: float, title: str
) -> str:
    """A symmetric node x node matrix of pair values; red below the threshold, blue above."""
    n = max(len(labels), 1)
    side = min(24.0, (H * 2 - 140) / n)
    width, height = max(700, int(140 + n * side + 20)), int(60 + n * side + 110)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot plot-heatmap" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="10" y="18" class="title">{escape(title)}</text>',
    ]
    top, left = 110, 140
    for i, label in enumerate(labels):
        y = top + i * side + side * 0.7
        out.append(f'<text x="{left - 6}" y="{y:.1f}" text-anchor="end">{escape(label)}</text>')
        x = left + i * side + side * 0.7
        out.append(
            f'<text x="{x:.1f}" y="{top - 6}" transform="rotate(-60 {x:.1f} {top - 6})">'
            f"{escape(label)}</text>"
        )
    top_value = max(cells.values(), default=threshold) or 1.0
    for (i, j), value in cells.items():
        if value < threshold:
            shade = 0.35 + 0.65 * (1 - value / threshold) if threshold else 1.0
            colour = f"rgba(214,39,40,{shade:.2f})"
        else:
            colour = f"rgba(76,120,168,{0.25 + 0.75 * value / top_value:.2f})"
        for a, b in ((i, j), (j, i)):
            out.append(
                f'<rect class="cell" data-v="{value:g}" x="{left + b * side:.1f}" '
                f'y="{top + a * side:.1f}" width="{side - 1:.1f}" height="{side - 1:.1f}" '
                f'fill="{colour}"><title>{escape(labels[a])} &lt;-&gt; {escape(labels[b])}: '
                f"{_fmt(value)} GB/s</title></rect>"
            )
    return "\n".join([*out, "</svg>"])


def time_plot(
    times: Sequence[float], series: Sequence[tuple[str, Sequence[float]]], title: str, unit: str
) -> str:
    """Lines of values against time (seconds since the epoch, labelled as UTC days)."""
    from datetime import UTC, datetime

    ys = [y for _, values in series for y in values]
    ticks = nice_ticks(0.0, max(ys, default=1.0) * 1.05)
    start, end = (times[0], times[-1]) if times else (0.0, 1.0)
    frame = Frame(start, max(end, start + 1), 0.0, ticks[-1])
    out = _open("time", title, "time (UTC)", unit)
    out += _y_axis(frame, ticks)
    for k in range(7):
        at = start + (frame.x1 - start) * k / 6
        out.append(
            f'<text x="{frame.x(at):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">'
            f"{datetime.fromtimestamp(at, UTC):%m-%d %H:%M}</text>"
        )
    for k, (name, values) in enumerate(series):
        colour = PALETTE[k % len(PALETTE)]
        coords = " ".join(
            f"{frame.x(t):.1f},{frame.y(v):.1f}" for t, v in zip(times, values, strict=True)
        )
        lx = LEFT + k * 110
        out.append(
            f'<g class="series" data-name="{escape(name)}" data-last="{_fmt(values[-1])}">'
            f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="1.6"/>'
            f'<rect x="{lx}" y="{TOP - 4}" width="12" height="10" fill="{colour}"/>'
            f'<text x="{lx + 16}" y="{TOP + 5}" class="legend">{escape(name)}</text></g>'
        )
    return "\n".join([*out, "</svg>"])
