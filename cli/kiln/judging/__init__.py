"""Judging burn-in results: typed results, rules, thresholds, verdicts, localisation, the report.

    report = judge(cluster, gemm, allreduce, ib=ib)  # BurninReport: verdicts, figures
    report.drain()                      # {node: "kiln: gemm gpu3 612 TFLOPS < floor 700"}
    localise(busbw_by_pair, threshold)  # which nodes or links make a fabric slow
    pair_schedule(nodes)                # rounds of node pairs for the pairwise pass
    Locator(fabric, threshold)          # node, rail or leaf uplink, in rounds (judging.locate)

Pure: no files, no SSH, no Slurm. The campaign (kiln.burnin) gathers the results into a run
record (kiln.records.burnin), which reads them back as the typed records judged here.
"""

from __future__ import annotations

from kiln.judging.analysis import judge
from kiln.judging.model import BurninReport
from kiln.judging.pairs import Localisation, localise, pair_schedule
from kiln.judging.results import AllreduceResult, GemmResult, NoResult
from kiln.judging.thresholds import Floors, floors_for
from kiln.judging.verdicts import Action, Severity, Verdict

__all__ = [
    "Action",
    "AllreduceResult",
    "BurninReport",
    "Floors",
    "GemmResult",
    "Localisation",
    "NoResult",
    "Severity",
    "Verdict",
    "floors_for",
    "judge",
    "localise",
    "pair_schedule",
]
