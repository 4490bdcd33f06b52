"""Judge a burn-in run record: results read back (kiln.records.burnin), judged (kiln.judging)."""

from __future__ import annotations

from pathlib import Path

from kiln.burnin.dcgm import add_recorded_verdicts
from kiln.inventory.model import Cluster
from kiln.judging import BurninReport, judge
from kiln.records.burnin import load_run


def judge_run(run_dir: Path | str, cluster: Cluster) -> BurninReport:
    """Load a run record and judge it against the cluster's profiles and floors."""
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
