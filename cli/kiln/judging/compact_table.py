"""A compact result file (kiln.judging.compact, format 4) read into the table the rules judge.

    table = read_table(data, source)   # bytes of results.compact; ResultError if not
    table.allreduce[job]               # AllreduceRow, or why it has no result
    table.gemm[node]                   # GemmRow, or why it has no result
    table.gemm_record(node)            # its record, from `source` (the run's documents)

One split per line, a row per result, no record: the records of the few results a rule reads
whole (a GEMM that is not clean) or a report plots come from `source`. ResultError names the
line when the file is of another format, was cut short (no newline at its end), has a line of
the wrong shape, lost lines (a collection's C line counts more), or holds an R line (a result
judged from its record: the caller reads the records instead).
"""

from __future__ import annotations

import gc
import json

from kiln.judging.compact import FORMAT, HEADER
from kiln.judging.results import NO_RESULT, ResultError
from kiln.judging.table import AllreduceRow, GemmRow, RecordSource, ResultTable

_HEADER = HEADER.encode()


def read_table(data: bytes, source: RecordSource) -> ResultTable:
    """The rows of a format-4 compact file's bytes (ResultError naming the line if not)."""
    if not data.startswith(_HEADER):
        raise ResultError(f"not a kiln compact result file of format {FORMAT}")
    if not data.endswith(b"\n"):
        lines = data.count(b"\n") + 1
        raise ResultError(f"line {lines}: cut short (no newline at its end)")
    try:
        text = data[len(_HEADER) :].decode()
    except UnicodeDecodeError as exc:
        raise ResultError(f"not UTF-8 at byte {exc.start + len(_HEADER)}") from None
    enabled = gc.isenabled()
    gc.disable()  # 100,000 tuples and no cycles (as kiln.judging.analysis.judge)
    try:
        return _read(text.split("\n"), source)
    finally:
        if enabled:
            gc.enable()


def _read(lines: list[str], source: RecordSource) -> ResultTable:
    out = ResultTable(source=source)
    gemm, allreduce = out.gemm, out.allreduce
    new_a, new_g = AllreduceRow._make, GemmRow._make
    del lines[-1]  # after the last newline
    since = 0  # result lines since the last C line
    for number, line in enumerate(lines, 2):
        fields = line.split("\t")
        kind, count = fields[0], len(fields)
        since += 1
        if kind == "A" and count == 12:
            allreduce[fields[1]] = new_a(fields[2:])
        elif kind == "G" and count == 6:
            gemm[fields[1]] = new_g(fields[2:])
        elif kind == "E" and count == 4:
            try:
                reason = str(json.loads(fields[3]))
            except ValueError:
                raise ResultError(f"line {number}: unreadable reason") from None
            (gemm if fields[2] == "gemm" else allreduce)[fields[1]] = f"{NO_RESULT} ({reason})"
        elif kind == "C" and count == 3:  # a collection's end: its lines all there?
            if fields[2] != str(since - 1):
                wrote = f"{since - 1} lines where the collection wrote {fields[2]}"
                raise ResultError(f"line {number}: {wrote}")
            since = 0
        elif kind == "R" and count == 3:
            raise ResultError(f"line {number}: {fields[1]} is judged from its record")
        else:
            raise ResultError(f"line {number}: kind {kind!r} with {count} fields")
    if since:
        raise ResultError(f"line {number}: lines after the last collection's end")
    return out
