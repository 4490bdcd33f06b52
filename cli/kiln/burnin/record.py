"""The run record of a burn-in: where results land, and `judge_run` over it.

    <run>/run.json              manifest, written at submission: run id, suite, cluster, the
                                nodes and jobs that were submitted (so a missing file is a
                                failure, never a silently smaller run)
    <run>/gemm/<node>.json      stdout of workloads/gemm.py on that node (one Slurm array task)
    <run>/allreduce/<job>.json  stdout of workloads/allreduce.py, rank 0 (node-<n>, fabric-ring,
                                pair-r<k>-<a>--<b>, ...)
    <run>/nccl/<job>.txt|.json  nccl-tests all_reduce_perf output, text or its JSON file
    <run>/ib/...                InfiniBand: sysfs dumps before/after, ib_write_bw reports per
                                pair and rail (kiln.burnin.ib)
    <run>/report.json           the judged BurninReport (save_report); `kiln report` renders it

The Slurm stage submits the jobs with their stdout pointed at these paths (RunLayout), then
calls `judge_run` and `save_report`, and drains `report.drain()`. The gemm file is named by the
inventory name of its node: that, not the hostname inside the document, is authoritative.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kiln.burnin import ib as IB
from kiln.burnin.analysis import judge
from kiln.burnin.model import BurninReport
from kiln.burnin.results import (
    NO_RESULT,
    AllreduceResult,
    GemmResult,
    NoResult,
    ResultError,
    allreduce_from_doc,
    allreduce_from_nccl,
    gemm_from_doc,
)
from kiln.errors import InvalidInputError
from kiln.inventory.model import Cluster
from kiln.parsers import ParseError
from kiln.parsers.nccl_tests import parse_json, parse_text

MANIFEST_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RunLayout:
    root: Path

    manifest = property(lambda self: self.root / "run.json")
    report = property(lambda self: self.root / "report.json")

    def gemm(self, node: str) -> Path:
        return self.root / "gemm" / f"{node}.json"

    def allreduce(self, job: str) -> Path:
        return self.root / "allreduce" / f"{job}.json"

    def nccl(self, job: str, ext: str = "txt") -> Path:
        return self.root / "nccl" / f"{job}.{ext}"

    def ib_sysfs(self, node: str, phase: str) -> Path:
        return IB.sysfs_path(self.root, node, phase)

    def ib_report(self, pair: str, rail: int) -> Path:
        return IB.report_path(self.root, pair, rail)


@dataclass
class RunResults:
    manifest: dict
    gemm: dict[str, GemmResult | NoResult] = field(default_factory=dict)
    allreduce: list[AllreduceResult] = field(default_factory=list)
    missing_jobs: list[NoResult] = field(default_factory=list)
    ib: IB.IbRun | None = None


def write_manifest(
    run_dir: Path,
    *,
    run_id: str,
    suite: str,
    cluster: str,
    nodes: list[str],
    allreduce_jobs: list[str] = (),
    nccl_jobs: list[str] = (),
    ib: dict | None = None,
) -> Path:
    """Create the run directory and its manifest (what the Slurm stage submits)."""
    layout = RunLayout(Path(run_dir))
    for sub in ("gemm", "allreduce", "nccl"):
        (layout.root / sub).mkdir(parents=True, exist_ok=True)
    doc = {
        "kiln": "burnin-run",
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "run_id": run_id,
        "suite": suite,
        "cluster": cluster,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "nodes": list(nodes),
        "allreduce_jobs": list(allreduce_jobs),
        "nccl_jobs": list(nccl_jobs),
        "ib": ib,  # kiln.burnin.ib.manifest_entry; None without InfiniBand
    }
    _write_atomic(layout.manifest, json.dumps(doc, indent=2) + "\n")
    return layout.manifest


def _read_json(path: Path) -> object:
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise ResultError("empty output")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultError(f"not JSON: {exc.msg} at line {exc.lineno}") from None


def load_run(run_dir: Path | str) -> RunResults:
    """Every result of the run; a submitted node or job without a readable one is a NoResult."""
    layout = RunLayout(Path(run_dir))
    if not layout.root.is_dir():
        raise InvalidInputError(f"burn-in run directory {layout.root} does not exist")
    manifest = json.loads(layout.manifest.read_text()) if layout.manifest.is_file() else {}
    run = RunResults(manifest=manifest)
    found = {p.stem: p for p in sorted((layout.root / "gemm").glob("*.json"))}
    for node in manifest.get("nodes") or sorted(found):
        path = found.get(node)
        if path is None:
            run.gemm[node] = NoResult(node)
            continue
        try:
            run.gemm[node] = gemm_from_doc(node, _read_json(path))
        except (OSError, ResultError) as exc:
            run.gemm[node] = NoResult(node, f"{NO_RESULT} ({exc})")
    jobs = {p.stem: p for p in sorted((layout.root / "allreduce").glob("*.json"))}
    for job in dict.fromkeys([*(manifest.get("allreduce_jobs") or ()), *jobs]):
        try:
            if job not in jobs:
                raise ResultError("no output")
            run.allreduce.append(allreduce_from_doc(job, _read_json(jobs[job])))
        except (OSError, ResultError) as exc:
            run.missing_jobs.append(NoResult(f"allreduce/{job}", f"{NO_RESULT} ({exc})"))
    outputs = {p.stem: p for p in sorted((layout.root / "nccl").glob("*.*"))}
    for job in dict.fromkeys([*(manifest.get("nccl_jobs") or ()), *outputs]):
        path = outputs.get(job)
        try:
            if path is None:
                raise ResultError("no output")
            text = path.read_text(encoding="utf-8")
            parsed = parse_json(text) if path.suffix == ".json" else parse_text(text)
            run.allreduce.append(allreduce_from_nccl(job, parsed))
        except (OSError, ResultError, ParseError) as exc:
            run.missing_jobs.append(NoResult(f"nccl/{job}", f"{NO_RESULT} ({exc})"))
    run.ib = IB.load_ib(layout.root, manifest)
    return run


def judge_run(run_dir: Path | str, cluster: Cluster) -> BurninReport:
    """Load a run record and judge it against the cluster's profiles and floors."""
    run = load_run(run_dir)
    return judge(
        cluster,
        run.gemm,
        run.allreduce,
        missing_jobs=run.missing_jobs,
        run_id=run.manifest.get("run_id") or Path(run_dir).name,
        suite=run.manifest.get("suite"),
        ib=run.ib,
    )


def save_report(run_dir: Path | str, report: BurninReport) -> Path:
    path = RunLayout(Path(run_dir)).report
    _write_atomic(path, json.dumps(report.to_dict(), separators=(",", ":")) + "\n")
    return path


def load_report(run_dir: Path | str) -> BurninReport:
    """The stored report of a run (a run directory or the report.json file itself)."""
    path = Path(run_dir)
    path = path if path.is_file() else RunLayout(path).report
    if not path.is_file():
        raise InvalidInputError(
            f"no burn-in report at {path}",
            hint="judge the run first, or pass --inventory to judge it now",
        )
    try:
        return BurninReport.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInputError(f"{path} is not a readable burn-in report ({exc})") from None


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
