"""The compact result record: every gemm and all-reduce result of a run in one text file.

A run record keeps each workload's document as its own file (gemm/<node>.json,
allreduce/<job>.json); at 12,500 nodes that is 112,500 files, and opening them costs more than
judging them. So kiln.burnin.collect also writes every result, from the same text as its file,
to `<run>/results.compact`, and the record loader reads that one file first (a result it lacks
is read from its own file, as before). `encode` gives one line per result; `pack` appends a
batch of them as blocks of columns. Format 3:

    #kiln-results 3
    G<TAB>node<TAB>host<TAB>clean 0|1<TAB>throttle reasons, sorted, comma-separated<TAB>
      tflops per device, comma-separated<TAB>[hostname, host, device_kind, dtype,
      [[index, name, tflops, checksum_ok, [throttle reasons], temp_c_max, error, digest,
      bit_mismatches, bit_checks]]]
    A<TAB>job<TAB>host,host<TAB>world_size<TAB>implementation<TAB>verdict_bytes<TAB>
      verdict_busbw_gbs<TAB>correct 0|1<TAB>ring 0|1<TAB>wrong<TAB>size<TAB>busbw at size|
      <TAB>[[bytes, busbw_gbs, algbw_gbs, time_us], ...]
    E<TAB>name<TAB>gemm|allreduce<TAB>"why the document could not be read" (JSON string)
    B<TAB>A|G<TAB>count, then one line per field of those lines (name first): that field of
      `count` results in order, joined by tabs (a block: one split per field, not per result)

A line's fields before its JSON are its row in the table the rules judge (kiln.judging.table:
gemm_row and allreduce_row give them, here and for records read one file at a time): `clean`
is 1 when every device's checksum is ok, none has an error or a changed repeat, all digests
agree and every TFLOPS figure is finite (anything else is judged from the record). Format 2
(older kiln: G lines with the JSON only, no blocks) is still read by `decode`;
kiln.judging.compact_table reads format 3 only. An all-reduce's rows
stay text until something iterates them (PackedRows): the rules read one row, at
FABRIC_BYTES, kept beside them. A file must end with a newline and a block must hold `count`
values in each of its lines (else a write was cut short: ResultError naming the line). Lines
are written only from results the readers accepted (gemm_from_doc, allreduce_from_doc), so a
line and its file judge the same; later lines replace earlier ones for the same name (a second
collection). Pure: text in, text or records out.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from kiln.judging.results import (
    AllreduceResult,
    GemmDevice,
    GemmResult,
    PackedRows,
    ResultError,
    allreduce_from_doc,
    builder,
    gemm_from_doc,
)
from kiln.judging.table import NOT_CLEAN, allreduce_row, gemm_row

FORMAT = 3
READABLE = (2, 3)  # what decode reads; table (the fast path) reads FORMAT only
HEADER = f"#kiln-results {FORMAT}\n"
FILENAME = "results.compact"
_UNSAFE = ("\t", "\n", "\r")


@dataclass
class CompactResults:
    """What a compact file holds: results, or why a document could not be read (by name)."""

    gemm: dict[str, GemmResult | str] = field(default_factory=dict)
    allreduce: dict[str, AllreduceResult | str] = field(default_factory=dict)


def read_document(text: str) -> object:
    """A workload's JSON document; ResultError says why not (the record loader's words)."""
    if not text.strip():
        raise ResultError("empty output")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultError(f"not JSON: {exc.msg} at line {exc.lineno}") from None


def _safe(*texts: str) -> bool:
    return not any(c in t for t in texts for c in _UNSAFE)


def _error(kind: str, name: str, exc: Exception) -> str:
    return f"E\t{name}\t{kind}\t{json.dumps(str(exc))}\n"


def encode(kind: str, name: str, text: str) -> str:
    """One line for a workload's document ("gemm" or "allreduce"), or "" when the name or a
    field cannot be held by the format (that result is then read from its own file)."""
    if not _safe(kind, name):
        return ""
    try:
        doc = read_document(text)
        if kind == "gemm":
            return _gemm_line(name, gemm_from_doc(name, doc))
        if kind == "allreduce":
            return _allreduce_line(allreduce_from_doc(name, doc))
    except ResultError as exc:
        return _error(kind, name, exc)
    return ""


def _gemm_line(node: str, r: GemmResult) -> str:
    devices = [
        [d.index, d.name, d.tflops, d.checksum_ok, list(d.throttle_reasons), d.temp_c_max,
         d.error, d.digest, d.bit_mismatches, d.bit_checks]
        for d in r.devices
    ]  # fmt: skip
    body = json.dumps([r.hostname, r.host, r.device_kind, r.dtype, devices], separators=(",", ":"))
    row = gemm_row(r)
    if not _safe(*row):  # a tab or newline in a host or a throttle reason: from the record
        row = NOT_CLEAN
    return f"G\t{node}\t" + "\t".join(row) + f"\t{body}\n"


def _allreduce_line(a: AllreduceResult) -> str:
    row = allreduce_row(a)
    if not _safe(row.hosts, a.implementation) or any("," in h or not h for h in a.hosts):
        return ""
    rows = json.dumps(
        [[r.bytes, r.busbw_gbs, r.algbw_gbs, r.time_us] for r in a.rows], separators=(",", ":")
    )
    return "A\t" + "\t".join((a.job, *row, rows)) + "\n"


def _header(text: str) -> int | None:
    """The format of a compact file's text (None: not one kiln reads)."""
    for version in READABLE:
        if text.startswith(f"#kiln-results {version}\n"):
            return version
    return None


def decode(text: str) -> CompactResults:
    """Every result of a compact file; ResultError when it is not one (or a line is bad)."""
    version = _header(text)
    if version is None:
        raise ResultError(f"not a kiln compact result file (format {READABLE})")
    # Many small long-lived objects and no cycles: the cyclic collector would rescan them all
    # again and again, doubling the time (as in kiln.judging.analysis.judge).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _decode(text, version)
    finally:
        if enabled:
            gc.enable()


_new_result = builder(AllreduceResult)
_new_device = builder(GemmDevice)
_new_gemm = builder(GemmResult)


def allreduce_record(name: str, rest: Sequence[str]) -> AllreduceResult:
    """The record of an A line's fields after its name (ValueError when one is bad)."""
    (hosts, world, impl, vbytes, vbusbw, correct, ring, wrong, size, at, rows) = rest
    if not rows.endswith("]"):
        raise ValueError("rows cut short")
    return _new_result(
        name, tuple(hosts.split(",")) if hosts else (), int(world), impl,
        PackedRows(rows, int(size), float(at) if at else None), int(vbytes),
        float(vbusbw), correct == "1", ring == "1", int(wrong),
    )  # fmt: skip


def gemm_record(name: str, body: str) -> GemmResult:
    """The record of a G line's JSON (ValueError when it is bad)."""
    if not body.endswith("]"):
        raise ValueError("devices cut short")
    hostname, host, device_kind, dtype, devices = json.loads(body)
    return _new_gemm(
        name, hostname, device_kind, dtype,
        tuple(_new_device(*_device(d)) for d in devices), host,
    )  # fmt: skip


def _decode(text: str, version: int) -> CompactResults:
    out = CompactResults()
    gemm, allreduce = out.gemm, out.allreduce
    loads = json.loads
    for number, kind, entry in _entries(text):
        try:  # one split per line: JSON fields hold no raw tab (json.dumps escapes it)
            if kind == "A":  # a block: one record per column tuple
                for name, *rest in zip(*entry, strict=True):
                    allreduce[name] = allreduce_record(name, rest)
                continue
            if kind == "G":
                for name, *rest in zip(*entry, strict=True):
                    gemm[name] = gemm_record(name, rest[-1])
                continue
            if not entry:
                continue
            kind, name, *rest = entry.split("\t")
            if kind == "A":
                allreduce[name] = allreduce_record(name, rest)
            elif kind == "G":
                if version == 2:
                    (body,) = rest
                else:
                    _host, _clean, _throttle, _tflops, body = rest
                gemm[name] = gemm_record(name, body)
            elif kind == "E":
                what, reason = rest
                (gemm if what == "gemm" else allreduce)[name] = str(loads(reason))
            else:
                raise ValueError(f"unknown line kind {kind!r}")
        except (ValueError, TypeError, IndexError) as exc:
            raise ResultError(f"line {number}: {exc}") from None
    return out


WIDTH = {"A": 13, "G": 7}  # fields of a result's line, its kind and name included


def pack(lines: list[str]) -> str:
    """A batch of result lines (encode's) as appended to the file: E lines as they are, then
    the A lines as one block and the G lines as another (so within a batch a result wins over
    an error for the same name). A block is `B<TAB>kind<TAB>count`, then one line per field
    (name first), its values in result order joined by tabs: read back with one split per
    field instead of one per result."""
    singles: list[str] = []
    blocks: dict[str, list[list[str]]] = {"A": [], "G": []}
    for line in lines:
        fields_ = line[:-1].split("\t") if line.endswith("\n") else []
        if fields_ and len(fields_) == WIDTH.get(fields_[0]):
            blocks[fields_[0]].append(fields_[1:])
        elif line:
            singles.append(line)
    text = "".join(singles)
    for kind, rows in blocks.items():
        if rows:
            text += f"B\t{kind}\t{len(rows)}\n" + "".join(
                "\t".join(column) + "\n" for column in zip(*rows, strict=True)
            )
    return text


def _entries(text: str) -> Iterator[tuple[int, str | None, object]]:
    """(line number, "A" or "G", the block's columns) per block, (line number, None, the
    line) per other line; ResultError when a block is cut short or its columns disagree."""
    lines = _lines(text)
    i, end = 0, len(lines)
    while i < end:
        line, number = lines[i], i + 2
        if not line.startswith("B\t"):
            yield number, None, line
            i += 1
            continue
        try:
            _b, kind, count = line.split("\t")
            width, size = WIDTH[kind] - 1, int(count)
        except (ValueError, KeyError):
            raise ResultError(f"line {number}: not a block header") from None
        columns = [c.split("\t") for c in lines[i + 1 : i + 1 + width]]
        if len(columns) != width or any(len(c) != size for c in columns):
            raise ResultError(f"line {number}: block of {size} {kind} results cut short or torn")
        yield number, kind, columns
        i += 1 + width


def _lines(text: str) -> list[str]:
    """The lines after the header; a last line without its newline (a write cut short by a
    crash) makes the file unreadable: ResultError naming that line."""
    lines = text.split("\n")
    if lines[-1]:
        raise ResultError(f"line {len(lines)}: cut short (no newline at its end)")
    return lines[1:-1]


def _device(d: list) -> list:
    d[4] = tuple(d[4])  # throttle reasons
    return d
