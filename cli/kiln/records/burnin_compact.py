"""A burn-in run record read from its compact file alone, when that file holds the whole run;
None whenever anything would need the records read one file at a time.

    fast = load_compact(run_dir)   # CompactRun (its ResultTable), or None: load_run instead

None (never a partial answer) when: no manifest or no node in it; no compact file, or one of
an older format, cut short or with a bad line (load_run then reads it, or each result's own
file); a node or all-reduce job of the manifest without a line but with a file; a result
file or line the manifest does not name; nccl-tests output files. A node or job with neither
a line nor a file has no result: judged a failure, as the records path judges it. Reading
files is all this module does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kiln.errors import InvalidInputError
from kiln.judging import compact
from kiln.judging.compact_table import read_table
from kiln.judging.ib import IbRun
from kiln.judging.results import ResultError
from kiln.judging.table import ResultTable
from kiln.records.burnin import RunLayout, json_stems, load_ib, read_manifest


@dataclass
class CompactRun:
    manifest: dict
    table: ResultTable  # its nodes and jobs: the manifest's
    ib: IbRun | None = None


def load_compact(run_dir: Path | str) -> CompactRun | None:
    """The run's compact columns when they cover the whole run, else None (see above)."""
    layout = RunLayout(Path(run_dir))
    path = layout.root / compact.FILENAME
    try:
        manifest = read_manifest(layout.manifest)
        since = path.stat().st_mtime_ns
        table = read_table(path.read_bytes())
    except (OSError, InvalidInputError, ResultError):
        return None
    nodes = list(manifest.get("nodes") or ())
    jobs = dict.fromkeys(manifest.get("allreduce_jobs") or ())
    if not nodes or manifest.get("nccl_jobs") or any((layout.root / "nccl").glob("*.*")):
        return None
    if not table.gemm.keys() <= set(nodes) or not table.allreduce.keys() <= jobs.keys():
        return None  # a line for a result the manifest does not name
    if len(table.gemm) < len(set(nodes)) and any(
        layout.gemm(n).exists() for n in nodes if n not in table.gemm
    ):
        return None  # a result with a file and no line (collect cut short): the records
    if len(table.allreduce) < len(jobs) and any(
        layout.allreduce(j).exists() for j in jobs if j not in table.allreduce
    ):
        return None
    for directory, names in (("gemm", table.gemm), ("allreduce", table.allreduce)):
        found = json_stems(layout.root / directory, since)  # None: unchanged since the lines
        if found is not None and not found.issubset(names):
            return None  # a result file with no line: the records read it
    table.nodes, table.jobs = nodes, list(jobs)
    return CompactRun(manifest, table, load_ib(layout, manifest))
