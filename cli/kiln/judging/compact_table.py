"""A format-3 compact result file read into the table the rules judge (kiln.judging.table).

    table = read_table(data)      # bytes of results.compact; ResultError if not
    table.allreduce[job]          # AllreduceRow, or why it has no result
    table.gemm[node]              # GemmRow, or why it has no result
    table.allreduce_record(job)   # built from its rows' JSON; table.gemm_record(node): devices'

Read from bytes with one find per line: a block's fields (kiln.judging.compact.pack) are
decoded and split once per field, and the last field of each result, the large JSON (the
rows of 100,000 all-reduces, 60 of the 76 MB at 12,500 nodes, and the GEMM devices), stays
bytes until a record is built from it: for a result that is not clean, or when a report reads
them. ResultError names the line when the file is of another format, was cut short (no newline
at its end, or a block with fewer values than it says), or a line has the wrong number of
fields.
"""

from __future__ import annotations

import gc
import json

from kiln.judging.compact import FORMAT, HEADER, WIDTH, allreduce_record, gemm_record
from kiln.judging.results import NO_RESULT, AllreduceResult, GemmResult, ResultError
from kiln.judging.table import AllreduceRow, GemmRow, RecordSource, ResultTable

_HEADER = HEADER.encode()
_ROW = {"A": AllreduceRow._make, "G": GemmRow._make}


class _JsonFields(RecordSource):
    """Each result's last field (its JSON), by kind, in file order: a later line replaces an
    earlier one for the same name, as in the table. Joined and split once, when first asked."""

    def __init__(self, table: ResultTable) -> None:
        self.table = table
        self.sources: dict[str, list[tuple[object, object]]] = {"A": [], "G": []}
        self.found: dict[str, dict[str, str]] = {}

    def last(self, kind: str, name: str) -> str:
        if kind not in self.found:
            found: dict[str, str] = {}
            for names, values in self.sources[kind]:
                if isinstance(names, str):
                    found[names] = values  # type: ignore[assignment]
                else:
                    text = str(values, "utf-8")  # type: ignore[call-overload]
                    found.update(zip(names, text.split("\t"), strict=True))  # type: ignore[arg-type]
            self.found[kind] = found
        return self.found[kind][name]

    def gemm(self, node: str) -> GemmResult:
        return gemm_record(node, self.last("G", node))

    def allreduce(self, job: str) -> AllreduceResult:
        row = self.table.allreduce[job]
        return allreduce_record(job, (*row, self.last("A", job)))


def read_table(data: bytes) -> ResultTable:
    """The columns of a format-3 compact file's bytes (ResultError naming the line if not)."""
    if not data.startswith(_HEADER):
        raise ResultError(f"not a kiln compact result file of format {FORMAT}")
    if not data.endswith(b"\n"):
        lines = data.count(b"\n") + 1
        raise ResultError(f"line {lines}: cut short (no newline at its end)")
    enabled = gc.isenabled()
    gc.disable()  # 100,000 tuples and no cycles (as kiln.judging.compact.decode)
    try:
        return _read(data)
    finally:
        if enabled:
            gc.enable()


def _read(data: bytes) -> ResultTable:
    out = ResultTable()
    out.source = _JsonFields(out)
    pos, end, number = len(_HEADER), len(data), 2
    while pos < end:
        stop = data.index(b"\n", pos)
        line = data[pos:stop]
        if line.startswith(b"B\t"):
            pos, number = _block(out, data, line, stop, number)
        else:
            _line(out, line.decode(errors="replace"), number)
            pos, number = stop + 1, number + 1
    return out


def _block(out: ResultTable, data: bytes, line: bytes, stop: int, number: int) -> tuple[int, int]:
    try:
        _b, kind, count = line.decode().split("\t")
        width, size = WIDTH[kind] - 1, int(count)
    except (ValueError, KeyError, UnicodeDecodeError):
        raise ResultError(f"line {number}: not a block header") from None
    spans, pos = [], stop + 1
    for _ in range(width):
        stop = data.find(b"\n", pos)
        if stop < 0:
            break
        spans.append((pos, stop))
        pos = stop + 1
    torn = ResultError(f"line {number}: block of {size} {kind} results cut short or torn")
    if len(spans) != width:
        raise torn
    try:
        columns = [data[a:b].decode().split("\t") for a, b in spans[:-1]]
    except UnicodeDecodeError:
        raise torn from None
    a, b = spans[-1]
    # The last field (60 of 76 MB at 12,500 nodes) is counted in place and kept as a view of
    # the file's bytes, not copied, until a record needs it.
    if any(len(c) != size for c in columns) or data.count(b"\t", a, b) != size - 1:
        raise torn
    if data[b - 1 : b] != b"]":
        raise torn
    last = memoryview(data)[a:b]
    names, rows = columns[0], map(_ROW[kind], zip(*columns[1:], strict=True))
    (out.allreduce if kind == "A" else out.gemm).update(zip(names, rows, strict=True))
    out.source.sources[kind].append((names, last))
    return pos, number + 1 + width


def _line(out: ResultTable, line: str, number: int) -> None:
    fields_ = line.split("\t")
    kind, count = fields_[0], len(fields_)
    if kind in WIDTH and count == WIDTH[kind] and fields_[-1].endswith("]"):
        (out.allreduce if kind == "A" else out.gemm)[fields_[1]] = _ROW[kind](fields_[2:-1])
        out.source.sources[kind].append((fields_[1], fields_[-1]))
    elif kind == "E" and count == 4:
        try:
            reason = str(json.loads(fields_[3]))
        except ValueError:
            raise ResultError(f"line {number}: unreadable reason") from None
        (out.gemm if fields_[2] == "gemm" else out.allreduce)[fields_[1]] = (
            f"{NO_RESULT} ({reason})"
        )
    elif line:
        raise ResultError(f"line {number}: kind {kind!r} with {count} fields")
