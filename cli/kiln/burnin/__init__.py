"""Burn-in: workloads shipped to the nodes, their results, judging, localisation, run records.

    report = judge_run(run_dir, cluster)     # BurninReport: verdicts, drain reasons, figures
    save_report(run_dir, report)             # <run>/report.json, re-rendered by `kiln report`
    report.drain()                           # {node: "kiln: gemm gpu3 612 TFLOPS < floor 700"}
    pair_schedule(nodes)                     # rounds of node pairs for the pairwise pass
    ib.plan_rounds(hcas, views, ...)         # InfiniBand pairs and rails for ib_write_bw

Nothing here prints, submits jobs or touches a node; the Slurm stage does that around it.
"""

from __future__ import annotations

from kiln.burnin.analysis import judge
from kiln.burnin.model import BurninReport
from kiln.burnin.pairs import Localisation, localise, pair_schedule
from kiln.burnin.record import (
    RunLayout,
    judge_run,
    load_report,
    load_run,
    save_report,
    write_manifest,
)
from kiln.burnin.results import AllreduceResult, GemmResult, NoResult
from kiln.burnin.thresholds import Floors, floors_for
from kiln.burnin.verdicts import Action, Severity, Verdict

__all__ = [
    "Action",
    "AllreduceResult",
    "BurninReport",
    "Floors",
    "GemmResult",
    "Localisation",
    "NoResult",
    "RunLayout",
    "Severity",
    "Verdict",
    "floors_for",
    "judge",
    "judge_run",
    "load_report",
    "load_run",
    "localise",
    "pair_schedule",
    "save_report",
    "write_manifest",
]
