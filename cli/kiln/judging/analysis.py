"""Judging: burn-in results + the Cluster -> a BurninReport of verdicts.

Rules (thresholds from `kiln.judging.thresholds`: profile floors, `kiln_burnin` overrides):
  result / gpu_count   a missing or unreadable result, or fewer devices than declared: critical
  checksum             the gemm's numbers disagree with its FP64 reference, changed between
                       repeats, or differ bitwise from the node's other GPUs: critical (SDC)
  gemm_floor           a GPU below the absolute floor of its profile
  gemm_vs_node_best    a GPU more than gemm_relative_pct below the best GPU of its node
  throttle             hardware/thermal slowdown seen while the gemm ran (sw_power_cap is normal
                       under a full GEMM and is not a failure)
  node_vs_fleet        a node's MEAN GPU TFLOPS more than node_relative_pct below the median of
                       the nodes of its profile. The mean, not the slowest GPU: one slow GPU is
                       already caught by the per-GPU rules; this rule is for nodes slow as a
                       whole (power or cooling limits, clocks, PCIe), which the mean shows.
  tested               a node the run could not test: busy with jobs outside the reservation
                       (the campaign says so), or its result came from another host (a GEMM
                       whose `host` or a node all-reduce whose hosts are not the node): no other
                       verdict, never drained, and the run is incomplete (not passed).
  allreduce_*          see kiln.judging.rules_allreduce and kiln.judging.pairs; floors by scope
                       (intra-node, rails x rate x efficiency, fleet-relative), each verdict
                       naming its rule (Verdict.rule).
  ib_*                 see kiln.judging.rules_ib (HCAs, ib_write_bw per rail, error counters).
Each node gets one verdict per check (its worst GPU's figure); failing GPUs get their own. The
work is one pass over the GPUs plus a median per profile: linear in the fleet.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Mapping

from kiln.inventory.model import Cluster
from kiln.judging._rules import DRAIN, LOOK, C, W
from kiln.judging._rules import node_verdict as _node
from kiln.judging.ib import IbRun
from kiln.judging.model import NOT_TESTED, NOT_TESTED_BUSY, BurninReport
from kiln.judging.results import AllreduceResult, GemmResult, NoResult
from kiln.judging.rules_allreduce import judge_allreduce
from kiln.judging.rules_gemm import FAILING_THROTTLE, HARDWARE_THROTTLE, judge_fleet, judge_gemm
from kiln.judging.rules_ib import judge_ib
from kiln.judging.thresholds import Floors, floors_for
from kiln.judging.verdicts import Action, Verdict
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
    not_tested: Mapping[str, str] | None = None,
) -> BurninReport:
    """Judge one run. `gemm` holds a result or NoResult per node that was part of the run;
    `ib` what it recorded of InfiniBand (None: no node of the run declares HCAs);
    `not_tested` the nodes the campaign could not test (busy), each with its message."""
    # Judging allocates many small long-lived objects and no cycles: the cyclic collector
    # would rescan the whole result set again and again (as in kiln.inventory's loader).
    enabled = gc.isenabled()
    gc.disable()
    try:
        skip = dict(not_tested or {})
        allreduce, missing_jobs = _untested(cluster, gemm, list(allreduce), missing_jobs, skip)
        return _judge(cluster, gemm, allreduce, missing_jobs, run_id, suite, ib, skip)
    finally:
        if enabled:
            gc.enable()


def _untested(cluster, gemm, allreduce, missing_jobs, skip: dict[str, str]):
    """Add to `skip` every node whose result came from another host (a GEMM whose `host`, or
    a node all-reduce whose hosts, are not the node); drop the per-node all-reduce results
    and missing jobs of the skipped nodes. (all-reduce results, missing jobs)."""
    for node in cluster.compute:
        result = gemm.get(node.name)
        ran = result.ran_elsewhere() if isinstance(result, GemmResult) else None
        if ran and node.name not in skip:
            skip[node.name] = f"{NOT_TESTED}: its result came from {ran}, not {node.name}"
    by_job = {f"node-{n.name}": n.name for n in cluster.compute}
    for a in allreduce:
        node = by_job.get(a.job)
        if not node:
            continue  # not a per-node job (the pairs, the ring): 87,500 of 100,000 at scale
        others = [h for h in a.hosts if h != node]
        if others and node not in skip:
            skip[node] = f"{NOT_TESTED}: its all-reduce ran on {others[0]}, not {node}"
    owned = {f"allreduce/node-{n}" for n in skip}
    kept = [a for a in allreduce if by_job.get(a.job) not in skip]
    return kept, [j for j in missing_jobs if j.name not in owned]


def start_report(
    cluster: Cluster, run_id: str, suite: str | None, skip: Mapping[str, str]
) -> tuple[BurninReport, dict[str, Floors], Callable[[str], Floors]]:
    """A report holding a `tested` verdict for each node not tested (`skip`), the floors of each
    hardware profile as judging asks for them (the dict becomes report.floors), and the function
    that asks. Shared by this module's judge and kiln.judging.columns'."""
    report = BurninReport(cluster=cluster.name, run_id=run_id, suite=suite)
    for name, message in skip.items():  # busy: nothing to look at; another host: Slurm's
        report.not_tested[name] = message
        action = Action.NONE if message.startswith(NOT_TESTED_BUSY) else LOOK
        report.verdicts.append(_node(name, "tested", False, W, action, message))
    cache: dict[str, Floors] = {}

    def floors(profile_id: str) -> Floors:
        if profile_id not in cache:
            cache[profile_id] = floors_for(get_profile(profile_id), cluster.burnin)
        return cache[profile_id]

    return report, cache, floors


def _judge(cluster, gemm, allreduce, missing_jobs, run_id, suite, ib, skip) -> BurninReport:
    report, cache, floors = start_report(cluster, run_id, suite, skip)
    means: dict[str, list[tuple[str, float]]] = {}
    for node in cluster.compute:
        result = gemm.get(node.name)
        if result is None or node.name in skip:
            continue  # not part of this run, or not tested
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
    if skip:  # what other rules said about a node that was not tested is no verdict on it
        report.verdicts = [v for v in report.verdicts if v.node not in skip or v.check == "tested"]
    report.floors = dict(sorted(cache.items()))
    report.sort()
    return report
