"""nccl-tests in burn-in: the launcher's document completed from the tool's own output.

On GPU nodes where the nccl stage built it, workloads/allreduce_launch.py runs `all_reduce_perf`
and prints `{"kind": "allreduce", "implementation": "nccl-tests", "output": <its stdout>, ...}`:
the nodes have no kiln, so kiln reads that output when it collects the run (`complete_text`,
called by kiln.burnin.collect), with kiln.parsers.nccl_tests, and adds what workloads/allreduce.py
prints itself: `hosts`, `world_size`, `rows` (out-of-place time, algbw, busbw per size),
`verdict_bytes`, `verdict_busbw_gbs`, `correct`, and `wrong`, the total of the #wrong columns
(every row, out-of-place and in-place). The record keeps the output beside them, so a stored run
can be read again. torch's documents (implementation "torch", wrong 0) need nothing.
"""

from __future__ import annotations

import json
import re

from kiln.parsers import ParseError
from kiln.parsers.nccl_tests import NcclResult, parse_text

IMPLEMENTATION = "nccl-tests"
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16"}
_NCCL_VERSION = re.compile(r"\bNCCL version (?P<v>\d+\.\d+\.\d+\S*)")
# nccl-tests: "# nccl-tests version 2.13.10 ..."; rccl-tests: "rccl-tests: Version develop:83d38d9"
_TESTS_VERSION = re.compile(
    r"^(?:#\s*nccl-tests version|rccl-tests: Version) (?P<v>\S+)", re.MULTILINE
)


def document_fields(result: NcclResult, verdict_bytes: int | None = None) -> dict:
    """The all-reduce document's fields from a parsed all_reduce_perf run.

    The verdict is taken at `verdict_bytes` when the sweep has it, else at its largest size.
    Bandwidth is the out-of-place figure, as nccl-tests' own summary and
    kiln.judging.results.allreduce_from_nccl take it."""
    by_size: dict[int, dict] = {}
    for row in result.rows:
        oop = row.out_of_place
        if oop is None or row.size_bytes <= 0:
            continue
        wrong = sum((m.wrong or 0) for m in (row.out_of_place, row.in_place) if m)
        by_size.pop(row.size_bytes, None)  # a repeated size: the last one counts
        by_size[row.size_bytes] = {
            "bytes": row.size_bytes,
            "count": row.count,
            "time_us": oop.time_us,
            "algbw_gbs": oop.algbw_gbs,
            "busbw_gbs": oop.busbw_gbs,
            "wrong": wrong,
        }
    if not by_size:
        raise ParseError(IMPLEMENTATION, "no non-empty out-of-place rows in the result table")
    rows = list(by_size.values())
    verdict = by_size.get(verdict_bytes or 0) or max(rows, key=lambda r: r["bytes"])
    devices = sorted(result.devices, key=lambda d: d.rank)
    hosts = [d.host.split(".")[0] for d in devices]
    measures = [m for r in result.rows for m in (r.out_of_place, r.in_place) if m]
    wrong = result.wrong_total
    return {
        "hostname": hosts[0] if hosts else "",
        "hosts": hosts,
        "world_size": len(devices) or result.params.get("nGpus", 1),
        "backend": "nccl",
        "dtype": DTYPES.get(result.rows[0].dtype, result.rows[0].dtype),
        "rows": rows,
        "verdict_bytes": verdict["bytes"],
        "verdict_busbw_gbs": verdict["busbw_gbs"],
        "wrong": wrong,
        "out_of_bounds": result.out_of_bounds,
        "validated": any(m.wrong is not None for m in measures),
        "correct": wrong == 0 and not result.out_of_bounds,
        "avg_busbw_gbs": result.avg_busbw_gbs,
        # stopped after these sizes: the report shows why the larger ones are missing
        **({"failure": result.failure} if result.failure else {}),
    }


def complete(doc: dict) -> dict:
    """The launcher's document with the parsed fields; any other document as it is.

    Raises ParseError when the output holds no result table."""
    if doc.get("implementation") != IMPLEMENTATION or "rows" in doc:
        return doc
    output = str(doc.get("output") or "")
    fields = document_fields(parse_text(output), doc.get("verdict_bytes"))
    versions = {}
    if match := _NCCL_VERSION.search(output):
        versions["nccl_version"] = match["v"]
    if match := _TESTS_VERSION.search(output):
        versions["nccl_tests_version"] = match["v"]
    return {**doc, **fields, **versions}


def complete_text(text: str) -> str:
    """A fetched allreduce/<job>.json, completed when nccl-tests made it.

    Text that is not a JSON object is kept as it is (the run record's loader reports it); an
    output kiln cannot read keeps its document, with `error` saying why (no `rows`: no result)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    if not isinstance(doc, dict):
        return text
    try:
        done = complete(doc)
    except ParseError as exc:
        done = {**doc, "error": f"nccl-tests output unreadable: {exc}"}
    if done is doc:
        return text
    return json.dumps(done, indent=1) + "\n"
