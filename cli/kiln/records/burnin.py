"""The run record of a burn-in: where results land, how they are read back, the stored report.

    <run>/run.json              manifest, written at submission: run id, suite, cluster, the
                                nodes and jobs that were submitted (so a missing file is a
                                failure, never a silently smaller run)
    <run>/documents.kz          the workloads' documents, one compressed frame per node and
                                collection (kiln.records.documents), by name:
        gemm/<node>.json        stdout of workloads/gemm.py on that node (its pinned job)
        allreduce/<job>.json    stdout of workloads/allreduce.py, rank 0 (node-<n>, fabric-ring,
                                pair-r<k>-<a>--<b>, ...); a record an older kiln wrote has
                                these as files of those names
    <run>/results.compact       each of those results as its row (kiln.judging.compact)
    <run>/nccl/<job>.txt|.json  nccl-tests all_reduce_perf output, text or its JSON file
    <run>/ib/sysfs-before|after/<node>.txt   InfiniBand: each HCA node's sysfs dump around
                                the jobs; <run>/ib/<pair>-rail<k>.txt the client's ib_write_bw
                                report (the manifest's "ib" entry: manifest_entry)
    <run>/report.json           the judged BurninReport (save_report); `kiln report` renders it
    <run>/timings.json          how long each phase took, for `kiln plan --estimate`

The campaign (kiln.burnin) submits the jobs with their results pointed at these paths
(RunLayout), brings them home, judges `load_run` (kiln.burnin.judge_run: kiln.judging over this
record), saves the report and drains `report.drain()`. The gemm file is named by the inventory
name of the node it was meant for; the `host` its job wrote into it says where it ran (judging
rejects a result from another node). Reading and writing files is all this module does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kiln.errors import InvalidInputError
from kiln.judging import compact
from kiln.judging.ib import PORT, IbPair, IbRun
from kiln.judging.model import BurninReport
from kiln.judging.results import (
    NO_RESULT,
    AllreduceResult,
    GemmResult,
    NoResult,
    ResultError,
    allreduce_from_doc,
    allreduce_from_nccl,
    gemm_from_doc,
)
from kiln.parsers import ParseError
from kiln.parsers.ib_write_bw import IbWriteBwResult, parse_ib_write_bw
from kiln.parsers.nccl_tests import parse_json, parse_text
from kiln.records.documents import RunDocuments

MANIFEST_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RunLayout:
    root: Path

    manifest = property(lambda self: self.root / "run.json")
    report = property(lambda self: self.root / "report.json")
    timings = property(lambda self: self.root / "timings.json")

    # Where an older kiln kept each document as its own file (still read, first, by
    # kiln.records.documents; hand-made records and test fixtures are written this way).
    def gemm(self, node: str) -> Path:
        return self.root / "gemm" / f"{node}.json"

    def allreduce(self, job: str) -> Path:
        return self.root / "allreduce" / f"{job}.json"

    def nccl(self, job: str, ext: str = "txt") -> Path:
        return self.root / "nccl" / f"{job}.{ext}"

    def ib_sysfs(self, node: str, phase: str) -> Path:
        """phase: "before" or "after" the jobs."""
        return self.root / "ib" / f"sysfs-{phase}" / f"{node}.txt"

    def ib_report(self, pair: str, rail: int) -> Path:
        return self.root / "ib" / f"{pair}-rail{rail}.txt"


@dataclass
class RunResults:
    manifest: dict
    gemm: dict[str, GemmResult | NoResult] = field(default_factory=dict)
    allreduce: list[AllreduceResult] = field(default_factory=list)
    missing_jobs: list[NoResult] = field(default_factory=list)
    ib: IbRun | None = None


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
    not_tested: dict[str, str] | None = None,
    container: str | None = None,
) -> Path:
    """Create the run directory and its manifest (what the campaign submits; `not_tested`:
    the nodes it could not test, node -> why, e.g. busy with jobs outside the reservation;
    `container`: the image the workloads ran in, kiln_burnin.container)."""
    layout = RunLayout(Path(run_dir))
    layout.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    layout.root.chmod(0o700)  # a run record is private: 0700 directories, 0600 files
    for sub in ("gemm", "allreduce", "nccl"):
        (layout.root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
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
        "ib": ib,  # manifest_entry; None without InfiniBand
        "not_tested": dict(not_tested or {}),
        "container": container,
    }
    _write_atomic(layout.manifest, json.dumps(doc, indent=2) + "\n")
    return layout.manifest


def read_document(text: str | None) -> object | None:
    """A result document's JSON (None: the record has no such document; ResultError: not
    JSON, in kiln.judging.compact.read_document's words)."""
    return None if text is None else compact.read_document(text)


def read_manifest(path: Path) -> dict:
    """The run's manifest; a malformed one is an error naming the file, never a traceback."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"{path} is not a readable burn-in manifest ({exc})") from None
    lists = ("nodes", "allreduce_jobs", "nccl_jobs")
    if not isinstance(manifest, dict) or any(
        not isinstance(manifest.get(key) or [], list) for key in lists
    ):
        raise InvalidInputError(
            f"{path} is not a burn-in manifest (an object with lists {', '.join(lists)})"
        )
    return manifest


def load_run(run_dir: Path | str) -> RunResults:
    """Every result of the run, from its documents; a submitted node or job without a readable
    one is a NoResult."""
    layout = RunLayout(Path(run_dir))
    if not layout.root.is_dir():
        raise InvalidInputError(f"burn-in run directory {layout.root} does not exist")
    manifest = read_manifest(layout.manifest) if layout.manifest.is_file() else {}
    run = RunResults(manifest=manifest)
    kept = RunDocuments(layout.root)
    documents = kept.read_all()
    for node in manifest.get("nodes") or sorted(kept.names("gemm")):
        try:
            doc = read_document(documents.get(f"gemm/{node}.json"))
            run.gemm[node] = NoResult(node) if doc is None else gemm_from_doc(node, doc)
        except (OSError, ResultError) as exc:
            run.gemm[node] = NoResult(node, f"{NO_RESULT} ({exc})")
    submitted = list(manifest.get("allreduce_jobs") or ())
    extra = kept.names("allreduce").difference(submitted)  # then in glob's order
    for job in [*dict.fromkeys(submitted), *sorted(extra, key=lambda j: f"{j}.json")]:
        try:
            doc = read_document(documents.get(f"allreduce/{job}.json"))
            if doc is None:
                raise ResultError("no output")
            run.allreduce.append(allreduce_from_doc(job, doc))
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
    run.ib = load_ib(layout, manifest)
    return run


def save_report(run_dir: Path | str, report: BurninReport) -> Path:
    path = RunLayout(Path(run_dir)).report
    _write_atomic(path, json.dumps(report.to_dict(), separators=(",", ":")) + "\n")
    return path


def write_timings(
    run_dir: Path | str, nodes: int, seconds: dict[str, float], pair_rounds: int
) -> Path:
    """timings.json: the run's size and each phase's wall seconds (jobs: the per-node jobs and
    the fabric all-reduce; pairs: the pairwise pass, in `pair_rounds` rounds)."""
    path = RunLayout(Path(run_dir)).timings
    document = {"nodes": nodes, "pair_rounds": pair_rounds,
                "seconds": {k: round(v, 3) for k, v in seconds.items()}}  # fmt: skip
    _write_atomic(path, json.dumps(document) + "\n")
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


def manifest_entry(nodes: Sequence[str], pairs: Sequence[IbPair], port: int = PORT) -> dict:
    """The manifest's "ib" entry: the run's HCA nodes and the pairs planned for them."""
    return {"nodes": list(nodes), "port": port, "pairs": [p.to_dict() for p in pairs]}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def load_ib(layout: RunLayout, manifest: dict) -> IbRun | None:
    """The InfiniBand part of a run record; None when the run had no node with HCAs."""
    entry = manifest.get("ib") or {}
    if not entry.get("nodes"):
        return None
    run = IbRun(tuple(entry["nodes"]), int(entry.get("port", PORT)))
    run.pairs = [IbPair.from_dict(p) for p in entry.get("pairs", [])]
    for node in run.nodes:
        for phase, into in (("before", run.before), ("after", run.after)):
            text = _read(layout.ib_sysfs(node, phase))
            if text is not None:
                into[node] = text
    for pair in run.pairs:
        for rail in pair.rails:
            run.reports[(pair.name, rail.rail)] = read_ib_report(layout, pair.name, rail.rail)
    return run


def read_ib_report(layout: RunLayout, pair: str, rail: int) -> IbWriteBwResult | str:
    """One pair's ib_write_bw report on one rail, parsed, or why there is none."""
    text = _read(layout.ib_report(pair, rail))
    if text is None:
        return "no report: ib_write_bw failed, or the job timed out"
    try:
        return parse_ib_write_bw(text)
    except ParseError as error:
        return f"unreadable report ({error})"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.touch(mode=0o600)
    tmp.chmod(0o600)
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
