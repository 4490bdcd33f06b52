"""Burn-in results as typed records: the workloads' JSON documents and nccl-tests' output.

`gemm_from_doc` and `allreduce_from_doc` read the documents `workloads/gemm.py` and
`workloads/allreduce.py` print (the GEMM's `host`, added by the per-node job, is the node it ran
on: a result from another node than its record names is rejected when judged);
`allreduce_from_nccl` turns a parsed nccl-tests run into the same record, so judging and
plotting treat both alike. A malformed document raises ResultError, which
the run-record loader turns into a NoResult for that node or job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from kiln.parsers.nccl_tests import NcclResult

SCHEMA_VERSION = 1
NO_RESULT = "no result: job timed out or crashed"


class ResultError(ValueError):
    """A result document kiln cannot read."""


@dataclass(frozen=True, slots=True)
class GemmDevice:
    index: int
    name: str
    tflops: float
    checksum_ok: bool
    throttle_reasons: tuple[str, ...] = ()
    temp_c_max: float | None = None
    error: str | None = None
    # Silent data corruption, bitwise (workloads/gemm.py): the hash of its first product (the
    # same seeded product on every GPU of a node), and later products that differed from it.
    digest: str | None = None
    bit_mismatches: int = 0
    bit_checks: int = 0


@dataclass(frozen=True, slots=True)
class GemmResult:
    node: str
    hostname: str
    device_kind: str  # "cuda" or "cpu"
    dtype: str
    devices: tuple[GemmDevice, ...]
    host: str = ""  # the node the job ran on (the job wrapper's `host`); "" in older records

    def ran_elsewhere(self) -> str | None:
        """The host, when the result says it ran on another node than its record names."""
        ran = self.host.split(".")[0]
        return ran if ran and ran != self.node else None


@dataclass(frozen=True, slots=True)
class NoResult:
    """A node or job whose result is missing or unreadable: a failure, never a skip."""

    name: str
    reason: str = NO_RESULT


@dataclass(frozen=True, slots=True)
class BandwidthRow:
    bytes: int
    busbw_gbs: float
    algbw_gbs: float
    time_us: float


@dataclass(frozen=True, slots=True)
class AllreduceResult:
    job: str
    hosts: tuple[str, ...]  # distinct nodes, in rank order
    world_size: int
    # "nccl-tests" (all_reduce_perf) or "torch" (workloads/allreduce.py), then the library that
    # reduced when the document names it: "nccl-tests NCCL 2.18.5+cuda12.2", "torch NCCL 2.21.5",
    # "torch gloo" (one string, so the compact record and the report JSON carry it as it is)
    implementation: str
    rows: Sequence[BandwidthRow]
    verdict_bytes: int
    verdict_busbw_gbs: float
    correct: bool
    ring: bool = False
    wrong: int = 0  # nccl-tests: the #wrong columns' total (0 for torch, which checks the sum)

    @property
    def label(self) -> str:
        """What ran, for the report: "nccl-tests (NCCL 2.18.5+cuda12.2)", "torch NCCL 2.21.5"
        (torch's own NCCL, not the pinned one), "gloo" (torch on CPUs); the bare name when
        the document did not say (results recorded before kiln kept the library)."""
        name, _, library = self.implementation.partition(" ")
        if library == "gloo":
            return "gloo"
        if name == "nccl-tests" and library:
            return f"nccl-tests ({library})"
        return self.implementation

    @property
    def scope(self) -> str:
        """'node' (inside one node), 'pair' (two nodes) or 'fabric' (more)."""
        return {1: "node", 2: "pair"}.get(len(self.hosts), "fabric")

    def busbw_at(self, size: int) -> tuple[int, float]:
        """(bytes, busbw) at this message size when the sweep has it, else at the verdict's."""
        for row in reversed(self.rows):
            if row.bytes == size:
                return row.bytes, row.busbw_gbs
        return self.verdict_bytes, self.verdict_busbw_gbs


def builder(cls: type) -> Callable[..., Any]:
    """A constructor for a frozen slots dataclass that takes every field positionally and sets
    the slots directly: the frozen __init__'s per-field object.__setattr__ made reading
    100,000 GPUs' results cost more than judging them (0.8 against 1.5 us a GPU). For values
    already checked (a compact record written through kiln's own readers), never for raw input.
    Generated once per class, straight-line, as dataclasses generates its own __init__."""
    names = [f.name for f in fields(cls)]
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    scope.update({f"set_{n}": getattr(cls, n).__set__ for n in names})
    body = "".join(f" set_{n}(obj, {n})\n" for n in names)
    exec(f"def build({', '.join(names)}):\n obj = new(cls)\n{body} return obj\n", scope)  # noqa: S102
    return scope["build"]


def _distinct(names: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def gemm_from_doc(node: str, doc: Any) -> GemmResult:
    """The gemm workload's document for `node` (the run record's name for it, not its hostname)."""
    try:
        if doc.get("kind") != "gemm":
            raise ResultError(f"not a gemm document (kind {doc.get('kind')!r})")
        devices = []
        for d in doc["devices"]:
            clocks = d.get("clocks") or {}
            tflops = float(d.get("tflops") or 0.0)
            if not math.isfinite(tflops):  # NaN or inf: no figure, never a pass or a crash
                raise ValueError(f"device {d.get('index')} tflops {tflops} is not a number")
            devices.append(
                GemmDevice(
                    index=int(d["index"]),
                    name=d.get("name", ""),
                    tflops=tflops,
                    checksum_ok=bool(d.get("checksum_ok")),
                    throttle_reasons=tuple(clocks.get("throttle_reasons") or ()),
                    temp_c_max=clocks.get("temp_c_max"),
                    error=d.get("error"),
                    digest=d.get("digest"),
                    bit_mismatches=int(d.get("bit_mismatches") or 0),
                    bit_checks=int(d.get("bit_checks") or 0),
                )
            )
        return GemmResult(
            node=node,
            hostname=str(doc.get("hostname", "")),
            device_kind=str(doc.get("device_kind", "")),
            dtype=str(doc["devices"][0].get("dtype", "")) if doc["devices"] else "",
            devices=tuple(devices),
            host=str(doc.get("host") or ""),
        )
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise ResultError(f"unexpected gemm document ({exc!r})") from None


def implementation_of(doc: Any) -> str:
    """The record's implementation: "nccl-tests" or "torch" (documents recorded before nccl-tests
    ran say neither), then the library that reduced where the document names it: its
    nccl_version (nccl-tests prints the NCCL it loaded; torch reports the one it bundles) on the
    NCCL backend, "gloo" on torch's CPU backend."""
    name = str(doc.get("implementation") or "torch")
    backend = doc.get("backend")
    version = " ".join(str(doc.get("nccl_version") or "").split())[:40]  # one word, no tab
    if backend == "gloo":
        return f"{name} gloo"
    if backend in ("nccl", None) and version:
        return f"{name} NCCL {version}"
    if backend == "nccl" and name == "torch":
        return "torch NCCL"
    return name


def allreduce_from_doc(job: str, doc: Any) -> AllreduceResult:
    """An all-reduce document: torch's (workloads/allreduce.py, printed by rank 0) or nccl-tests'
    (completed by kiln.burnin.nccl_tests). `implementation` and `wrong` default to "torch" and 0,
    so results recorded before nccl-tests ran still read; `implementation_of` adds the library."""
    try:
        if doc.get("kind") != "allreduce":
            raise ResultError(f"not an allreduce document (kind {doc.get('kind')!r})")
        rows = tuple(
            BandwidthRow(
                bytes=int(r["bytes"]),
                busbw_gbs=float(r["busbw_gbs"]),
                algbw_gbs=float(r["algbw_gbs"]),
                time_us=float(r["time_us"]),
            )
            for r in doc["rows"]
        )
        return AllreduceResult(
            job=job,
            hosts=_distinct(list(doc["hosts"])),
            world_size=int(doc["world_size"]),
            implementation=implementation_of(doc),
            rows=rows,
            verdict_bytes=int(doc["verdict_bytes"]),
            verdict_busbw_gbs=float(doc["verdict_busbw_gbs"]),
            correct=bool(doc.get("correct")),
            ring=doc.get("nccl_algo") == "Ring",
            wrong=int(doc.get("wrong") or 0),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ResultError(f"unexpected allreduce document ({exc!r})") from None


def allreduce_from_nccl(
    job: str, result: NcclResult, verdict_bytes: int | None = None
) -> AllreduceResult:
    """A parsed nccl-tests all_reduce_perf run; the verdict at `verdict_bytes` or its largest size.

    Bandwidth is the out-of-place figure (what nccl-tests' summary line averages).
    """
    rows = tuple(
        BandwidthRow(
            bytes=r.size_bytes,
            busbw_gbs=r.out_of_place.busbw_gbs,
            algbw_gbs=r.out_of_place.algbw_gbs,
            time_us=r.out_of_place.time_us,
        )
        for r in result.rows
        if r.out_of_place is not None and r.size_bytes > 0
    )
    if not rows:
        raise ResultError("nccl-tests output has no non-empty out-of-place rows")
    wanted = verdict_bytes or max(r.bytes for r in rows)
    verdict = next((r for r in reversed(rows) if r.bytes == wanted), rows[-1])
    return AllreduceResult(
        job=job,
        hosts=_distinct([d.host.split(".")[0] for d in result.devices]),
        world_size=len(result.devices) or result.params.get("nGpus", 1),
        implementation="nccl-tests",
        rows=rows,
        verdict_bytes=verdict.bytes,
        verdict_busbw_gbs=verdict.busbw_gbs,
        correct=result.wrong_total == 0 and not result.out_of_bounds,
        wrong=result.wrong_total,
    )
