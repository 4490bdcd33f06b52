"""A burn-in run record read from its compact file, when that file holds the whole run; None
whenever anything would need the records read one document at a time.

    fast = load_compact(run_dir)   # CompactRun (its ResultTable), or None: load_run instead

None (never a partial answer) when: no manifest or no node in it; no compact file, or one of
another format, cut short or with a bad line (load_run then reads the documents); a result
judged from its record (an R line); documents without their lines (the documents file is
larger than the compact file's last C line says: a collection killed between writing the two)
or a line the manifest does not name; nccl-tests output files. A node or job
with neither a line nor a document has no result: judged a failure, as the records path
judges it. The records the rules or a report read whole come from the run's documents
(RecordsFromDocuments). Reading files is all this module does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kiln.errors import InvalidInputError
from kiln.judging import compact
from kiln.judging.compact_table import read_table
from kiln.judging.ib import IbRun
from kiln.judging.results import (
    AllreduceResult,
    GemmResult,
    ResultError,
    allreduce_from_doc,
    gemm_from_doc,
)
from kiln.judging.table import RecordSource, ResultTable
from kiln.records.burnin import RunLayout, load_ib, read_document, read_manifest
from kiln.records.documents import RunDocuments


@dataclass
class CompactRun:
    manifest: dict
    table: ResultTable  # its nodes and jobs: the manifest's
    ib: IbRun | None = None


class RecordsFromDocuments(RecordSource):
    """A result's record, read from its document when a rule or a report needs it whole; a
    KeyError when the record holds no readable document (judge_run then reads the records)."""

    def __init__(self, documents: RunDocuments) -> None:
        self.documents = documents

    def _doc(self, name: str) -> object:
        try:
            doc = read_document(self.documents.text(name))
        except ResultError:
            doc = None
        if doc is None:
            raise KeyError(name)
        return doc

    def gemm(self, node: str) -> GemmResult:
        try:
            return gemm_from_doc(node, self._doc(f"gemm/{node}.json"))
        except ResultError:
            raise KeyError(node) from None

    def allreduce(self, job: str) -> AllreduceResult:
        try:
            return allreduce_from_doc(job, self._doc(f"allreduce/{job}.json"))
        except ResultError:
            raise KeyError(job) from None


def load_compact(run_dir: Path | str) -> CompactRun | None:
    """The run's compact rows when they cover the whole run, else None (see above)."""
    layout = RunLayout(Path(run_dir))
    documents = RunDocuments(layout.root)
    try:
        manifest = read_manifest(layout.manifest)
        data = (layout.root / compact.FILENAME).read_bytes()
        table = read_table(data, RecordsFromDocuments(documents))
    except (OSError, InvalidInputError, ResultError):
        return None
    nodes = list(manifest.get("nodes") or ())
    jobs = dict.fromkeys(manifest.get("allreduce_jobs") or ())
    if not nodes or manifest.get("nccl_jobs") or any((layout.root / "nccl").glob("*.*")):
        return None
    if not table.gemm.keys() <= set(nodes) or not table.allreduce.keys() <= jobs.keys():
        return None  # a line for a result the manifest does not name
    if compact.last_collected(data) != documents.size():
        return None  # documents without their lines (a collection killed between the two)
    if documents.files("gemm") or documents.files("allreduce"):
        return None  # documents kept as files (an older kiln's, or by hand): the records
    table.nodes, table.jobs = nodes, list(jobs)
    return CompactRun(manifest, table, load_ib(layout, manifest))
