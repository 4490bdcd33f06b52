"""Judging: burn-in results + the Cluster -> a BurninReport of verdicts.

Rules (thresholds from `kiln.judging.thresholds`: profile floors, `kiln_burnin` overrides):
  result / gpu_count   a missing or unreadable result, or fewer devices than declared: critical
  checksum             the gemm's numbers disagree with its FP64 reference: critical (SDC)
  gemm_floor           a GPU below the absolute floor of its profile
  gemm_vs_node_best    a GPU more than gemm_relative_pct below the best GPU of its node
  throttle             hardware/thermal slowdown seen while the gemm ran (sw_power_cap is normal
                       under a full GEMM and is not a failure)
  node_vs_fleet        a node's MEAN GPU TFLOPS more than node_relative_pct below the median of
                       the nodes of its profile. The mean, not the slowest GPU: one slow GPU is
                       already caught by the per-GPU rules; this rule is for nodes slow as a
                       whole (power or cooling limits, clocks, PCIe), which the mean shows.
  allreduce_*          see kiln.judging.rules_allreduce and kiln.judging.pairs.
  ib_*                 see kiln.judging.rules_ib (HCAs, ib_write_bw per rail, error counters).
Each node gets one verdict per check (its worst GPU's figure); failing GPUs get their own. The
work is one pass over the GPUs plus a median per profile: linear in the fleet.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping

from kiln.inventory.model import Cluster
from kiln.judging._rules import DRAIN, LOOK, C
from kiln.judging._rules import node_verdict as _node
from kiln.judging.ib import IbRun
from kiln.judging.model import BurninReport
from kiln.judging.results import AllreduceResult, GemmResult, NoResult
from kiln.judging.rules_allreduce import judge_allreduce
from kiln.judging.rules_gemm import FAILING_THROTTLE, HARDWARE_THROTTLE, judge_fleet, judge_gemm
from kiln.judging.rules_ib import judge_ib
from kiln.judging.thresholds import Floors, floors_for
from kiln.judging.verdicts import Verdict
from kiln.profiles import get_profile

__all__ = ["FAILING_THROTTLE", "HARDWARE_THROTTLE", "judge"]


def judge(
    cluster: Cluster,
    gemm: Mapping[str, GemmResult | NoResult],
    allreduce: Iterable[AllreduceResult] = (),
    *,
    missing_jobs: Iterable[NoResult] = (),
    run_id: str | None = None,
    suite: str | None = None,
    ib: IbRun | None = None,
) -> BurninReport:
    """Judge one run. `gemm` holds a result or NoResult per node that was part of the run;
    `ib` what it recorded of InfiniBand (None: no node of the run declares HCAs)."""
    # Judging allocates many small long-lived objects and no cycles: the cyclic collector
    # would rescan the whole result set again and again (as in kiln.inventory's loader).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _judge(cluster, gemm, allreduce, list(missing_jobs), run_id, suite, ib)
    finally:
        if enabled:
            gc.enable()


def _judge(cluster, gemm, allreduce, missing_jobs, run_id, suite, ib) -> BurninReport:
    report = BurninReport(cluster=cluster.name, run_id=run_id, suite=suite)
    cache: dict[str, Floors] = {}

    def floors(profile_id: str) -> Floors:
        if profile_id not in cache:
            cache[profile_id] = floors_for(get_profile(profile_id), cluster.burnin)
        return cache[profile_id]

    means: dict[str, list[tuple[str, float]]] = {}
    for node in cluster.compute:
        result = gemm.get(node.name)
        if result is None:
            continue  # not part of this run
        f = floors(node.gpu_model)
        report.node_profiles[node.name] = f.profile
        if isinstance(result, NoResult):
            report.verdicts.append(_node(node.name, "result", False, C, DRAIN, result.reason))
            continue
        report.verdicts.append(_node(node.name, "result", True))
        mean = judge_gemm(report, node, result, f)
        if mean is not None:
            means.setdefault(f.profile, []).append((node.name, mean))
    for profile_id, rows in means.items():
        judge_fleet(report, rows, cache[profile_id])
    judge_allreduce(report, cluster, allreduce, floors)
    judge_ib(report, cluster, ib, cluster.burnin.ib_write_bw_floor_pct)
    for job in missing_jobs:
        report.verdicts.append(
            Verdict(
                "job",
                job.name,
                "result",
                False,
                severity=C,
                action=LOOK,
                message=f"{job.name}: {job.reason}",
            )
        )
    report.floors = dict(sorted(cache.items()))
    report.sort()
    return report
