"""The HTML report rendered by headless Chromium: the SVG plots survive and are drawn.

Needs Debian's `chromium` package (apt-get install -y chromium); skipped without it.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from kiln.burnin import judge_run
from kiln.inventory import require_valid
from kiln.report import render

GPU8 = Path(__file__).parents[1] / "fixtures" / "burnin" / "gpu8"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.local,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)"
    ),
]


def chromium(tmp_path: Path, *args: str, size: str = "1200,2000") -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--window-size={size}",
    ]
    return subprocess.run(
        [CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=180, check=True
    )


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    report = judge_run(GPU8 / "run", require_valid(GPU8 / "inventory"))
    path = tmp / "report.html"
    path.write_text(render(report, "html"))
    return tmp, path


def test_dom_keeps_the_three_plots_and_their_points(page):
    tmp, path = page
    dom = chromium(tmp, "--dump-dom", path.as_uri()).stdout
    svgs = re.findall(r"<svg\b.*?</svg>", dom, flags=re.S)
    assert [re.search(r'class="plot (plot-\w+)"', s).group(1) for s in svgs] == [
        "plot-strip",
        "plot-lines",
        "plot-heatmap",
    ]
    assert len(re.findall(r"<circle", svgs[0])) == 56
    assert len(re.findall(r"<polyline", svgs[1])) == 16
    assert len(re.findall(r"<rect class=\"cell\"", svgs[2])) == 24


def decode_png(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """Width, height, bytes per pixel and the unfiltered rows of an 8-bit RGB(A) PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        header = chunk if kind == b"IHDR" else header
        idat += chunk if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytes(width * bpp)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def near(pixel: tuple[int, ...], rgb: tuple[int, int, int], tolerance: int = 40) -> bool:
    return all(abs(p - q) <= tolerance for p, q in zip(pixel, rgb, strict=False))


def test_screenshot_shows_the_plots_drawn(page):
    """Pixels in the plots' colours: blue points and lines, red failures, orange floor lines."""
    tmp, path = page
    png = tmp / "shot.png"
    chromium(
        tmp,
        f"--screenshot={png}",
        "--force-device-scale-factor=0.5",
        path.as_uri(),
        size="1200,2600",
    )
    width, height, bpp, rows = decode_png(png.read_bytes())
    assert (width, height) == (600, 1300)
    counts = {"blue": 0, "red": 0, "orange": 0}
    colours = {"blue": (76, 120, 168), "red": (214, 39, 40)}
    for row in rows[400:]:  # below the tables: the plots
        for x in range(0, width * bpp, bpp):
            pixel = tuple(row[x : x + 3])
            for name, rgb in colours.items():
                counts[name] += near(pixel, rgb)
            r, g, b = pixel  # the dashed floor lines, thin and anti-aliased at this scale
            counts["orange"] += r >= 200 and 90 <= g <= 210 and b <= 150 and r - b >= 80
    assert counts["blue"] > 500, counts  # passing GPUs, busbw lines, healthy pair cells
    assert counts["red"] > 200, counts  # failing GPUs, slow lines, slow pair cells
    assert counts["orange"] > 30, counts  # the floor lines
