"""nccl-tests (`all_reduce_perf` and siblings): the text report and the JSON file.

Text: a "# nThread ..." parameter line, "# Using devices" with one line per rank, a size table
whose columns come from its header (older releases have no `root` column; `-C 1` prints
`cputime`), and a footer with "Out of bounds values" and "Avg bus bandwidth". NCCL INFO/WARN
lines interleaved by NCCL_DEBUG are skipped. AMD's rccl-tests prints the same report, read the
same way ("AMD Instinct MI300X" as the device name).

A test that stops ("HOST: Test NCCL failure common.cu:1285 'internal error ...'", CUDA or HIP
alike) before its first size is a ParseError naming that line and host. One that stops after
some sizes keeps them (each row was measured and checked; a 128-node run that fails at 32 GiB
has still measured 8 GiB) and says so in `failure`.

JSON: nccl-tests writes it when given an output file (`-J`/`--output_file`, newer releases); the
document shape parsed here is the one src/util.cu writes (JSON_FILE_VERSION 2: `config`,
`devices`, `results` with `out_of_place`/`in_place` objects, `average_bus_bandwidth`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from kiln.parsers import ParseError

TOOL = "nccl-tests"

_PARAMS = re.compile(r"^#\s*nThread\s+\d+")
_PARAM_PAIR = re.compile(
    r"(nThread|nGpus|minBytes|maxBytes|warmup iters|iters|agg iters|"
    r"validation|graph|unalign):\s*(\d+)|(nThread|nGpus|minBytes|maxBytes)\s+(\d+)"
)
_DEVICE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<busid>[^\]]*)\]\s+(?P<name>.*?)\s*$"
)
_COLUMNS = re.compile(r"^#\s+size\s+count\s+type\s+")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>[\d.eE+-]+)")
_FAILURE = re.compile(r"^(?:(?P<host>[^\s:]+):\s+)?Test (?:\w+ )?failure\b")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<count>\d+)\s*(?P<status>\w+)?")


@dataclass(frozen=True, slots=True)
class NcclDevice:
    rank: int
    group: int | None
    pid: int
    host: str
    device: int
    bus_id: str  # "0000:04:00" in newer releases, "0x1b" in older ones
    name: str  # "NVIDIA H100 80GB HBM3"


@dataclass(frozen=True, slots=True)
class NcclMeasure:
    time_us: float
    algbw_gbs: float  # GB/s
    busbw_gbs: float  # GB/s
    wrong: int | None  # None when validation was off ("N/A")


@dataclass(frozen=True, slots=True)
class NcclRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    out_of_place: NcclMeasure | None
    in_place: NcclMeasure | None


@dataclass(frozen=True, slots=True)
class NcclResult:
    params: dict[str, int]  # nThread, nGpus, minBytes, maxBytes, iters, validation, ...
    devices: tuple[NcclDevice, ...]
    rows: tuple[NcclRow, ...]
    avg_busbw_gbs: float | None
    out_of_bounds: int | None
    failure: str | None = None  # the tool's own failure line, when it stopped after some sizes

    @property
    def hosts(self) -> list[str]:
        return sorted({d.host for d in self.devices})

    def row(self, size_bytes: int) -> NcclRow:
        """The last row at this size (nccl-tests repeats size 0 rows)."""
        for row in reversed(self.rows):
            if row.size_bytes == size_bytes:
                return row
        raise KeyError(size_bytes)

    @property
    def wrong_total(self) -> int:
        total = 0
        for row in self.rows:
            for m in (row.out_of_place, row.in_place):
                total += (m.wrong or 0) if m else 0
        return total


def _measure(fields: list[str], line_no: int, line: str) -> NcclMeasure:
    try:
        wrong = None if fields[3] == "N/A" else int(float(fields[3]))
        return NcclMeasure(float(fields[0]), float(fields[1]), float(fields[2]), wrong)
    except (ValueError, IndexError) as exc:
        raise ParseError(TOOL, f"bad measurement ({exc})", line_no=line_no, line=line) from None


def parse_text(text: str) -> NcclResult:
    """Parse the stdout of an nccl-tests binary."""
    params: dict[str, int] = {}
    devices: list[NcclDevice] = []
    rows: list[NcclRow] = []
    columns: list[str] | None = None
    avg: float | None = None
    oob: int | None = None
    failure: tuple[int, str, str | None] | None = None  # the first: the cause, not its echo

    for line_no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if failure is None and (match := _FAILURE.match(stripped)):
            failure = (line_no, line, match["host"])
            continue
        if stripped.startswith("#"):
            if _PARAMS.match(stripped):
                for m in _PARAM_PAIR.finditer(stripped):
                    key, value = (
                        (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
                    )
                    params[key] = int(value)
            elif match := _DEVICE.match(stripped):
                devices.append(
                    NcclDevice(
                        rank=int(match["rank"]),
                        group=int(match["group"]) if match["group"] else None,
                        pid=int(match["pid"]),
                        host=match["host"],
                        device=int(match["device"]),
                        bus_id=match["busid"],
                        name=match["name"],
                    )
                )
            elif _COLUMNS.match(stripped):
                columns = stripped.lstrip("#").split()
            elif match := _AVG_BUSBW.match(stripped):
                avg = float(match["value"])
            elif match := _OOB.match(stripped):
                oob = int(match["count"])
            continue
        if columns is None:
            continue  # banner or NCCL INFO lines before the table
        fields = stripped.split()
        if not fields[0].isdigit():
            continue  # NCCL INFO/WARN lines interleaved with the table
        # size count type redop [root] then two groups of time algbw busbw #wrong
        fixed = 5 if "root" in columns else 4
        if len(fields) != fixed + 8:
            raise ParseError(
                TOOL,
                f"{len(fields)} columns in a size row, expected {fixed + 8}",
                line_no=line_no,
                line=line,
            )
        try:
            size, count = int(fields[0]), int(fields[1])
            root = int(fields[4]) if fixed == 5 else None
        except ValueError:
            raise ParseError(TOOL, "size row is not numeric", line_no=line_no, line=line) from None
        rows.append(
            NcclRow(
                size_bytes=size,
                count=count,
                dtype=fields[2],
                redop=fields[3],
                root=root,
                out_of_place=_measure(fields[fixed : fixed + 4], line_no, line),
                in_place=_measure(fields[fixed + 4 : fixed + 8], line_no, line),
            )
        )
    if failure is not None and not rows:
        line_no, line, host = failure
        where = f" on {host}" if host else ""
        raise ParseError(
            TOOL, f"the test failed{where} before its first size", line_no=line_no, line=line
        )
    if columns is None:
        raise ParseError(TOOL, "no result table header ('#  size  count  type ...') found")
    if not rows:
        raise ParseError(TOOL, "result table has no rows")
    return NcclResult(
        params=params,
        devices=tuple(devices),
        rows=tuple(rows),
        avg_busbw_gbs=avg,
        out_of_bounds=oob,
        failure=failure[1].strip() if failure else None,
    )


def _json_measure(obj: object) -> NcclMeasure | None:
    if not isinstance(obj, dict):
        return None
    time = obj.get("time", obj.get("cpu_time"))
    wrong = obj.get("nwrong")
    return NcclMeasure(
        time_us=float(time),
        algbw_gbs=float(obj["alg_bw"]),
        busbw_gbs=float(obj["bus_bw"]),
        wrong=None if wrong is None else int(wrong),
    )


def parse_json(text: str) -> NcclResult:
    """Parse the JSON file nccl-tests writes with an output file (JSON_FILE_VERSION 2)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        lines = text.splitlines()
        line = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else None
        raise ParseError(TOOL, f"invalid JSON ({exc.msg})", line_no=exc.lineno, line=line) from None
    if not isinstance(doc, dict) or "results" not in doc:
        raise ParseError(TOOL, "JSON document has no 'results' list")
    try:
        config = doc.get("config") or {}
        params = {k: int(v) for k, v in config.items() if isinstance(v, int | float)}
        devices = tuple(
            NcclDevice(
                rank=int(d["rank"]),
                group=d.get("group"),
                pid=int(d["pid"]),
                host=d["hostname"],
                device=int(d["device"]),
                bus_id=d.get("device_hex", ""),
                name=d.get("device_info", ""),
            )
            for d in config.get("devices", doc.get("devices", []))
        )
        rows = tuple(
            NcclRow(
                size_bytes=int(r["size"]),
                count=int(r["count"]),
                dtype=r["type"],
                redop=r["redop"],
                root=int(str(r["root"]).strip()) if r.get("root") is not None else None,
                out_of_place=_json_measure(r.get("out_of_place")),
                in_place=_json_measure(r.get("in_place")),
            )
            for r in doc["results"]
        )
        avg_obj = doc.get("average_bus_bandwidth") or {}
        avg = float(avg_obj["bandwidth"]) if "bandwidth" in avg_obj else None
        oob_obj = doc.get("out_of_bounds") or {}
        oob = int(oob_obj["count"]) if "count" in oob_obj else None
    except (KeyError, TypeError, ValueError) as exc:
        raise ParseError(TOOL, f"unexpected JSON shape ({exc!r})") from None
    if not rows:
        raise ParseError(TOOL, "JSON 'results' list is empty")
    return NcclResult(
        params=params, devices=devices, rows=rows, avg_busbw_gbs=avg, out_of_bounds=oob
    )
