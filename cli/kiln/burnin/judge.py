"""Judge a burn-in run record: results read back (kiln.records.burnin), judged (kiln.judging)."""

from __future__ import annotations

from pathlib import Path

from kiln.burnin.dcgm import add_recorded_verdicts
from kiln.inventory.model import Cluster
from kiln.judging import BurninReport, judge
from kiln.judging.analysis import judge_results
from kiln.records.burnin import load_run
from kiln.records.burnin_compact import load_compact


def judge_run(run_dir: Path | str, cluster: Cluster) -> BurninReport:
    """Load a run record and judge it against the cluster's profiles and floors (from the
    compact file when it holds the whole run, else from each result's file)."""
    report = _judge_compact(run_dir, cluster)
    if report is not None:
        add_recorded_verdicts(report, run_dir)
        return report
    run = load_run(run_dir)
    report = judge(
        cluster,
        run.gemm,
        run.allreduce,
        missing_jobs=run.missing_jobs,
        run_id=run.manifest.get("run_id") or Path(run_dir).name,
        suite=run.manifest.get("suite"),
        ib=run.ib,
        not_tested=run.manifest.get("not_tested") or {},
    )
    add_recorded_verdicts(report, run_dir)  # the DCGM phase's runs, when it ran (kiln.burnin.dcgm)
    return report


def _judge_compact(run_dir: Path | str, cluster: Cluster) -> BurninReport | None:
    """The run judged from its compact file alone; None when it needs its records read."""
    fast = load_compact(run_dir)
    if fast is None:
        return None
    try:
        return judge_results(
            cluster, fast.table,
            run_id=fast.manifest.get("run_id") or Path(run_dir).name,
            suite=fast.manifest.get("suite"), ib=fast.ib,
            not_tested=fast.manifest.get("not_tested") or {},
        )  # fmt: skip
    except (ValueError, TypeError, IndexError, KeyError):
        return None  # a field that does not parse: the records path reads it (or its file)
