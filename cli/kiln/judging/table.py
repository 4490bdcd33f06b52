"""ResultTable: a run's results as the rules read them, one row of columns per result.

    table = ResultTable.from_records(gemm, allreduce, missing_jobs)   # records read one by one
    table = read_table(data)     # kiln.judging.compact_table: the run's compact file
    table.gemm[node]             # GemmRow, or the reason it has no result (a str)
    table.allreduce[job]         # AllreduceRow, or the reason it has no result
    table.gemm_record(node)      # its full GemmResult, built when a rule needs the devices

Every run is judged from this form (kiln.judging.analysis.judge_results), wherever its results
came from: the compact file fills it from its columns without a record per GPU, the records
path fills it from GemmResult and AllreduceResult through `gemm_row` and `allreduce_row`, the
same two functions that write the compact file's columns (kiln.judging.compact). A row holds
text, as the file does: a rule converts the one figure it reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kiln.judging.results import NO_RESULT, AllreduceResult, GemmResult, NoResult

# The message size an all-reduce across nodes is judged at (8 GiB; kiln.judging.thresholds).
# Here, not there, so that this module needs nothing beyond the standard library: the nodes
# make their results' rows with it (kiln.burnin.node_results).
FABRIC_BYTES = 8 << 30
FABRIC = str(FABRIC_BYTES)
NO_OUTPUT = f"{NO_RESULT} (no output)"


class GemmRow(NamedTuple):
    """A GEMM result's columns. `clean` ("1") says every device's checksum is ok, none has an
    error or a changed repeat, all digests agree and every figure is finite; only then are
    host, throttle (the union of the devices' reasons, sorted, comma-joined) and tflops (per
    device, comma-joined) filled. A row that is not clean is judged from its record."""

    host: str
    clean: str
    throttle: str
    tflops: str


class AllreduceRow(NamedTuple):
    """An all-reduce result's columns; `at` is busbw at `size` (FABRIC_BYTES) when the sweep
    has that size, else ""."""

    hosts: str  # comma-joined, in rank order
    world_size: str
    implementation: str
    verdict_bytes: str
    verdict_busbw: str
    correct: str  # "1" or "0"
    ring: str
    wrong: str  # nccl-tests' #wrong total
    size: str
    at: str

    def busbw_at_fabric(self) -> tuple[int, float]:
        """(bytes, busbw) at FABRIC_BYTES when the sweep has it, else at the verdict's size."""
        if self.size == FABRIC and self.at:
            return FABRIC_BYTES, float(self.at)
        return int(self.verdict_bytes), float(self.verdict_busbw)

    @property
    def label(self) -> str:
        return f"allreduce ({self.implementation})"


def _clean(r: GemmResult) -> bool:
    devices = r.devices
    return (
        all(d.checksum_ok and not d.error and not d.bit_mismatches for d in devices)
        and len({d.digest for d in devices if d.digest}) <= 1
        and all(math.isfinite(d.tflops) for d in devices)
    )


NOT_CLEAN = GemmRow("", "0", "", "")


def gemm_row(r: GemmResult) -> GemmRow:
    """The columns of a GEMM result (NOT_CLEAN when the rules must read its devices)."""
    throttle = sorted({t for d in r.devices for t in d.throttle_reasons})
    if not _clean(r) or any("," in t for t in throttle):
        return NOT_CLEAN
    return GemmRow(r.host, "1", ",".join(throttle), ",".join(repr(d.tflops) for d in r.devices))


def allreduce_row(a: AllreduceResult) -> AllreduceRow:
    """The columns of an all-reduce result."""
    size, busbw = a.busbw_at(FABRIC_BYTES)
    return AllreduceRow(
        ",".join(a.hosts), str(a.world_size), a.implementation, str(a.verdict_bytes),
        repr(a.verdict_busbw_gbs), "1" if a.correct else "0", "1" if a.ring else "0",
        str(a.wrong), FABRIC, repr(busbw) if size == FABRIC_BYTES else "",
    )  # fmt: skip


class RecordSource:
    """Where a table built from stored columns gets a result's full record, when a rule or a
    report needs it (kiln.judging.compact_table: from the line's JSON field)."""

    def gemm(self, node: str) -> GemmResult:
        raise KeyError(node)

    def allreduce(self, job: str) -> AllreduceResult:
        raise KeyError(job)


@dataclass
class ResultTable:
    gemm: dict[str, GemmRow | str] = field(default_factory=dict)
    allreduce: dict[str, AllreduceRow | str] = field(default_factory=dict)
    # The run's nodes and all-reduce jobs, in the order judged; one of them without a row has
    # no result (a failure). Empty: the rows' own keys.
    nodes: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)  # other jobs: (name, reason)
    source: RecordSource = field(default_factory=RecordSource)
    _records: dict[str, object] = field(default_factory=dict)

    def gemm_record(self, node: str) -> GemmResult:
        """Built once from the source and kept: a row that is not clean is read for its host
        (gemm_host) and again for its devices."""
        record = self._records.get(f"G{node}")
        if record is None:
            record = self._records[f"G{node}"] = self.source.gemm(node)
        return record  # type: ignore[return-value]

    def allreduce_record(self, job: str) -> AllreduceResult:
        record = self._records.get(f"A{job}")  # read once, by the report (RecordsOf keeps it)
        return record if record is not None else self.source.allreduce(job)  # type: ignore[return-value]

    def gemm_host(self, node: str, row: GemmRow) -> str:
        """The host a GEMM ran on (from the record when the row is not clean)."""
        return row.host if row.clean == "1" else self.gemm_record(node).host

    def put_gemm(self, node: str, result: GemmResult | NoResult) -> None:
        if isinstance(result, NoResult):
            self.gemm[node] = result.reason
            return
        self.gemm[node] = gemm_row(result)
        self._records[f"G{node}"] = result

    def put_allreduce(self, result: AllreduceResult) -> None:
        """Add a result; a job name given twice (records built by hand) keeps both."""
        job, n = result.job, 1
        while job in self.allreduce:
            n += 1
            job = f"{result.job} ({n})"
        self.allreduce[job] = allreduce_row(result)
        self._records[f"A{job}"] = result

    @classmethod
    def from_records(
        cls,
        gemm: Mapping[str, GemmResult | NoResult],
        allreduce: Iterable[AllreduceResult] = (),
        missing_jobs: Iterable[NoResult] = (),
    ) -> ResultTable:
        """The table of records read one result at a time (kiln.records.burnin.load_run) or
        built by hand."""
        table = cls(nodes=list(gemm), missing=[(j.name, j.reason) for j in missing_jobs])
        for node, result in gemm.items():
            table.put_gemm(node, result)
        for a in allreduce:
            table.put_allreduce(a)
        table.jobs = list(table.allreduce)
        return table
