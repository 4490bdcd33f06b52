"""perftest `ib_write_bw` (and the other *_bw tests, which print the same report).

    #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
    65536      5000             11745.64            11744.37           0.187910

The bandwidth unit depends on the flags: MB/sec by default (perftest divides by 0x100000, so
these are MiB/s), Gb/sec with --report_gbits (10^9 bit/s). Rows carry the printed values and the
same figures in Gb/s, so a floor per link rate ("90% of NDR 400") compares directly.

When server and client share one terminal or log, lines come twice; identical repeated rows are
kept once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiln.parsers import ParseError

TOOL = "ib_write_bw"

_TITLE = re.compile(r"^\s*(?P<title>\S.* BW Test)\s*$")
_SETTING = re.compile(r"(?P<key>[A-Za-z][\w*. -]*?)\s*:\s*(?P<value>\S+(?: \S+)*?)(?=\s{2,}|\s*$)")
_RESULT_HEADER = re.compile(
    r"^\s*#bytes\s+#iterations\s+BW peak\[(?P<u1>[^\]]+)\]\s+BW average\[(?P<u2>[^\]]+)\]"
    r"\s+MsgRate\[Mpps\]"
)
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
_ADDRESS = re.compile(r"^\s*(?P<side>local|remote) address:\s*LID\s+(?P<lid>0x[0-9a-fA-F]+|\d+)")

_TO_GBPS = {"MB/sec": 0x100000 * 8 / 1e9, "Gb/sec": 1.0}


@dataclass(frozen=True, slots=True)
class BwRow:
    bytes: int
    iterations: int
    bw_peak: float  # in the report's unit
    bw_average: float  # in the report's unit
    msg_rate_mpps: float
    bw_peak_gbps: float
    bw_average_gbps: float


@dataclass(frozen=True, slots=True)
class IbWriteBwResult:
    test: str | None  # "RDMA_Write BW Test"
    settings: dict[str, str]  # "Device": "mlx5_0", "Link type": "IB", "Mtu": "4096[B]", ...
    unit: str  # "MB/sec" or "Gb/sec"
    rows: tuple[BwRow, ...]
    local_lid: int | None = None
    remote_lid: int | None = None

    @property
    def device(self) -> str | None:
        return self.settings.get("Device")

    @property
    def link_type(self) -> str | None:
        return self.settings.get("Link type")

    @property
    def largest(self) -> BwRow:
        """The row for the largest message size (what a bandwidth floor is judged on)."""
        return max(self.rows, key=lambda r: r.bytes)


def parse_ib_write_bw(text: str) -> IbWriteBwResult:
    """Parse one ib_write_bw report (server or client side, with or without --report_gbits)."""
    title: str | None = None
    settings: dict[str, str] = {}
    unit: str | None = None
    rows: list[BwRow] = []
    seen: set[tuple[str, ...]] = set()
    lids: dict[str, int] = {}

    for line_no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or set(stripped) <= {"-", "*"} or stripped.startswith("*"):
            continue
        if match := _RESULT_HEADER.match(line):
            if match.group("u1") != match.group("u2") or match.group("u1") not in _TO_GBPS:
                raise ParseError(TOOL, "unknown bandwidth unit", line_no=line_no, line=line)
            if unit is not None and unit != match.group("u1"):
                raise ParseError(TOOL, "bandwidth unit changes mid-report", line_no=line_no)
            unit = match.group("u1")
            continue
        if match := _ROW.match(line):
            if unit is None:
                raise ParseError(TOOL, "result row before the header", line_no=line_no, line=line)
            key = match.groups()
            if key in seen:
                continue
            seen.add(key)
            factor = _TO_GBPS[unit]
            peak, avg = float(key[2]), float(key[3])
            rows.append(
                BwRow(
                    bytes=int(key[0]),
                    iterations=int(key[1]),
                    bw_peak=peak,
                    bw_average=avg,
                    msg_rate_mpps=float(key[4]),
                    bw_peak_gbps=peak * factor,
                    bw_average_gbps=avg * factor,
                )
            )
            continue
        if match := _ADDRESS.match(line):
            lids.setdefault(match.group("side"), int(match.group("lid"), 0))
            continue
        if match := _TITLE.match(line):
            title = title or match.group("title")
            continue
        if ":" in stripped and not stripped.startswith(("GID:", "local", "remote")):
            for setting in _SETTING.finditer(line):
                settings.setdefault(setting.group("key").strip(), setting.group("value"))
            continue
    if unit is None:
        raise ParseError(TOOL, "no result table (#bytes ... BW average ...) found")
    if not rows:
        raise ParseError(TOOL, "result table has no rows")
    return IbWriteBwResult(
        test=title,
        settings=settings,
        unit=unit,
        rows=tuple(rows),
        local_lid=lids.get("local"),
        remote_lid=lids.get("remote"),
    )
