"""The compact result record: every gemm and all-reduce result of a run in one text file.

A run record keeps each workload's document as its own file (gemm/<node>.json,
allreduce/<job>.json); at 12,500 nodes that is 112,500 files, and opening them costs more than
judging them. So kiln.burnin.collect also appends, per result, one line of this format to
`<run>/results.compact`, written from the same text as the file, and the record loader reads
that one file first (a result it lacks is read from its own file, as before). Format 2:

    #kiln-results 2
    G<TAB>node<TAB>[hostname, host, device_kind, dtype, [[index, name, tflops, checksum_ok,
                    [throttle reasons], temp_c_max, error, digest, bit_mismatches, bit_checks]]]
    A<TAB>job<TAB>host,host<TAB>world_size<TAB>implementation<TAB>verdict_bytes<TAB>
      verdict_busbw_gbs<TAB>correct 0|1<TAB>ring 0|1<TAB>wrong<TAB>size<TAB>busbw at size|
      <TAB>[[bytes, busbw_gbs, algbw_gbs, time_us], ...]
    E<TAB>name<TAB>gemm|allreduce<TAB>"why the document could not be read" (JSON string)

A gemm line's devices are one JSON array; an all-reduce line is split on tabs and its rows
stay text until something iterates them (PackedRows): the rules read one row, at FABRIC_BYTES,
kept beside them. Lines are written only from results the readers accepted (gemm_from_doc,
allreduce_from_doc), so a line and its file judge the same; later lines replace earlier ones
for the same name (a second collection). Pure: text in, text or records out.
"""

from __future__ import annotations

import gc
import json
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
from kiln.judging.thresholds import FABRIC_BYTES

FORMAT = 2
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
    return f"G\t{node}\t{body}\n"


def _allreduce_line(a: AllreduceResult) -> str:
    hosts = ",".join(a.hosts)
    if not _safe(hosts, a.implementation) or any("," in h or not h for h in a.hosts):
        return ""
    at = next((r.busbw_gbs for r in reversed(a.rows) if r.bytes == FABRIC_BYTES), None)
    rows = json.dumps(
        [[r.bytes, r.busbw_gbs, r.algbw_gbs, r.time_us] for r in a.rows], separators=(",", ":")
    )
    fields = (
        a.job, hosts, str(a.world_size), a.implementation, str(a.verdict_bytes),
        repr(a.verdict_busbw_gbs), "1" if a.correct else "0", "1" if a.ring else "0",
        str(a.wrong), str(FABRIC_BYTES), "" if at is None else repr(at), rows,
    )  # fmt: skip
    return "A\t" + "\t".join(fields) + "\n"


def decode(text: str) -> CompactResults:
    """Every result of a compact file; ResultError when it is not one (or a line is bad)."""
    if not text.startswith(HEADER):
        raise ResultError(f"not a kiln compact result file (format {FORMAT})")
    # Many small long-lived objects and no cycles: the cyclic collector would rescan them all
    # again and again, doubling the time (as in kiln.judging.analysis.judge).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _decode(text)
    finally:
        if enabled:
            gc.enable()


def _decode(text: str) -> CompactResults:
    out = CompactResults()
    gemm, allreduce = out.gemm, out.allreduce
    new_result = builder(AllreduceResult)
    new_device = builder(GemmDevice)
    new_gemm = builder(GemmResult)
    loads = json.loads
    for number, line in enumerate(text.split("\n")[1:], 2):
        if not line:
            continue
        try:  # one split per line: JSON fields hold no raw tab (json.dumps escapes it)
            kind, name, *rest = line.split("\t")
            if kind == "A":
                (hosts, world, impl, vbytes, vbusbw, correct, ring, wrong, size, at, rows) = rest
                allreduce[name] = new_result(
                    name, tuple(hosts.split(",")) if hosts else (), int(world), impl,
                    PackedRows(rows, int(size), float(at) if at else None), int(vbytes),
                    float(vbusbw), correct == "1", ring == "1", int(wrong),
                )  # fmt: skip
            elif kind == "G":
                (body,) = rest
                hostname, host, device_kind, dtype, devices = loads(body)
                gemm[name] = new_gemm(
                    name, hostname, device_kind, dtype,
                    tuple(new_device(*_device(d)) for d in devices), host,
                )  # fmt: skip
            elif kind == "E":
                what, reason = rest
                (gemm if what == "gemm" else allreduce)[name] = str(loads(reason))
            else:
                raise ValueError(f"unknown line kind {kind!r}")
        except (ValueError, TypeError, IndexError) as exc:
            raise ResultError(f"line {number}: {exc}") from None
    return out


def _device(d: list) -> list:
    d[4] = tuple(d[4])  # throttle reasons
    return d
