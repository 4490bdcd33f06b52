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

One path: every run is judged from a ResultTable (kiln.judging.table), whether its results came
from the run's compact file (kiln.judging.compact_table) or from records read one at a time
(`judge`, which fills a table from them). A healthy node is judged from its row's columns; the
rules read a result's full record only where something fails.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Mapping

from kiln.inventory.model import Cluster
from kiln.judging._rules import DRAIN, LOOK, C, W
from kiln.judging.ib import IbRun
from kiln.judging.model import NOT_TESTED, NOT_TESTED_BUSY, BurninReport
from kiln.judging.results import NO_RESULT, AllreduceResult, GemmResult, NoResult
from kiln.judging.rules_allreduce import judge_allreduce
from kiln.judging.rules_gemm import FAILING_THROTTLE, HARDWARE_THROTTLE, judge_fleet, judge_gemm
from kiln.judging.rules_ib import judge_ib
from kiln.judging.table import NO_OUTPUT, AllreduceRow, ResultTable
from kiln.judging.thresholds import Floors, floors_for
from kiln.judging.verdicts import Action, Verdict, node_verdict
from kiln.profiles import get_profile

__all__ = ["FAILING_THROTTLE", "HARDWARE_THROTTLE", "judge", "judge_results"]


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
    """Judge one run from its records. `gemm` holds a result or NoResult per node that was
    part of the run; `ib` what it recorded of InfiniBand (None: no node of the run declares
    HCAs); `not_tested` the nodes the campaign could not test (busy), each with its message."""
    table = ResultTable.from_records(gemm, allreduce, missing_jobs)
    return judge_results(cluster, table, run_id=run_id, suite=suite, ib=ib, not_tested=not_tested)


def judge_results(
    cluster: Cluster,
    table: ResultTable,
    *,
    run_id: str | None = None,
    suite: str | None = None,
    ib: IbRun | None = None,
    not_tested: Mapping[str, str] | None = None,
) -> BurninReport:
    """Judge one run from its table: its nodes (`table.nodes`) and all-reduce jobs
    (`table.jobs`); one of them without a row has no result at all, a failure."""
    # Judging allocates many small long-lived objects and no cycles: the cyclic collector
    # would rescan the whole result set again and again (as in kiln.inventory's loader).
    enabled = gc.isenabled()
    gc.disable()
    try:
        skip = dict(not_tested or {})
        jobs, missing = _untested(cluster, table, skip)
        return _judge(cluster, table, jobs, missing, run_id, suite, ib, skip)
    finally:
        if enabled:
            gc.enable()


def _untested(cluster: Cluster, table: ResultTable, skip: dict[str, str]):
    """Add to `skip` every node whose result came from another host (a GEMM whose `host`, or
    a node all-reduce whose hosts, are not the node). Returns the all-reduce jobs to judge,
    with their rows, and the missing jobs, (name, reason), both without the skipped nodes'."""
    for node in cluster.compute:
        row = table.gemm.get(node.name)
        if row is None or isinstance(row, str):
            continue
        ran = table.gemm_host(node.name, row).split(".")[0]
        if ran and ran != node.name and node.name not in skip:
            skip[node.name] = f"{NOT_TESTED}: its result came from {ran}, not {node.name}"
    rows: dict[str, AllreduceRow] = {}
    missing: list[tuple[str, str]] = []
    allreduce = table.allreduce
    for job in dict.fromkeys(table.jobs or allreduce):
        row = allreduce.get(job, NO_OUTPUT)
        if isinstance(row, str):
            missing.append((f"allreduce/{job}", row))
        else:
            rows[job] = row
    missing += table.missing
    compute = [n.name for n in cluster.compute]
    for node in compute:  # a node's all-reduce that ran elsewhere (rare)
        row = rows.get(f"node-{node}")
        if row is not None and row.hosts != node:
            others = [h for h in row.hosts.split(",") if h and h != node]
            if others and node not in skip:
                skip[node] = f"{NOT_TESTED}: its all-reduce ran on {others[0]}, not {node}"
    if skip:
        owned = {f"allreduce/node-{n}" for n in skip}
        missing = [m for m in missing if m[0] not in owned]
        for node in compute:
            if node in skip:
                rows.pop(f"node-{node}", None)
    return list(rows.items()), missing


def start_report(
    cluster: Cluster, run_id: str | None, suite: str | None, skip: Mapping[str, str]
) -> tuple[BurninReport, dict[str, Floors], Callable[[str], Floors]]:
    """A report holding a `tested` verdict for each node not tested (`skip`), the floors of each
    hardware profile as judging asks for them (the dict becomes report.floors), and the function
    that asks."""
    report = BurninReport(cluster=cluster.name, run_id=run_id, suite=suite)
    for name, message in skip.items():  # busy: nothing to look at; another host: Slurm's
        report.not_tested[name] = message
        action = Action.NONE if message.startswith(NOT_TESTED_BUSY) else LOOK
        report.verdicts.append(node_verdict(name, "tested", False, W, action, message))
    cache: dict[str, Floors] = {}

    def floors(profile_id: str) -> Floors:
        if profile_id not in cache:
            cache[profile_id] = floors_for(get_profile(profile_id), cluster.burnin)
        return cache[profile_id]

    return report, cache, floors


def _judge(cluster, table, jobs, missing, run_id, suite, ib, skip) -> BurninReport:
    report, cache, floors = start_report(cluster, run_id, suite, skip)
    run = dict.fromkeys(table.nodes or table.gemm)
    means: dict[str, list[tuple[str, float]]] = {}
    for node in cluster.compute:
        if node.name not in run or node.name in skip:
            continue  # not part of this run, or not tested
        f = floors(node.gpu_model)
        report.node_profiles[node.name] = f.profile
        row = table.gemm.get(node.name, NO_RESULT)
        if isinstance(row, str):
            report.verdicts.append(node_verdict(node.name, "result", False, C, DRAIN, row))
            continue
        report.verdicts.append(node_verdict(node.name, "result", True))
        mean = judge_gemm(report, node, row, f, table)
        if mean is not None:
            means.setdefault(f.profile, []).append((node.name, mean))
    for profile_id, rows in means.items():
        judge_fleet(report, rows, cache[profile_id])
    judge_allreduce(report, cluster, table, jobs, floors)
    judge_ib(report, cluster, ib, cluster.burnin.ib_write_bw_floor_pct)
    for name, reason in missing:
        report.verdicts.append(
            Verdict("job", name, "result", False, severity=C, action=LOOK,
                    message=f"{name}: {reason}")
        )  # fmt: skip
    if skip:  # what other rules said about a node that was not tested is no verdict on it
        report.verdicts = [v for v in report.verdicts if v.node not in skip or v.check == "tested"]
    report.floors = dict(sorted(cache.items()))
    report.sort()
    return report
