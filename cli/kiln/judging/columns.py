"""Judging a run from its compact file's columns (kiln.judging.compact_table), the fast path.

The same verdicts as kiln.judging.analysis.judge over the records, in the same order, built
without a record per GPU or per all-reduce: a healthy node is judged from its line's columns
(TFLOPS as one comma-separated field, `clean`, the union of its throttle reasons), a healthy
all-reduce from its tab-separated fields. Whatever is not healthy (a GPU below a floor, a
checksum, a throttle that fails, a wrong sum, a fabric ring, a field the format could not
hold) has its record built from the line and goes through the rules' own functions
(judge_gemm, _judge_correct, _judge_node, _judge_fabric): the fast path only decides that
nothing fails, and says every pass with the numbers the rules would. The report's all-reduce
list is built lazily, when a report or plot reads it (LazyResults).

    report = judge_table(cluster, table, nodes, jobs, run_id=..., ib=..., not_tested=...)

A value that does not parse raises ValueError: the caller falls back to the records.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence

from kiln.inventory.model import Cluster
from kiln.judging._rules import DRAIN, LOOK, C, W, _new_verdict
from kiln.judging._rules import node_verdict as _node
from kiln.judging.analysis import start_report
from kiln.judging.compact import allreduce_record, gemm_record
from kiln.judging.compact_table import CompactTable
from kiln.judging.ib import IbRun
from kiln.judging.model import NOT_TESTED, BurninReport
from kiln.judging.results import NO_RESULT, AllreduceResult
from kiln.judging.rules_allreduce import (
    _judge_correct,
    _judge_fabric,
    _judge_node,
    _judge_pairs,
    _pair_floor,
)
from kiln.judging.rules_gemm import FAILING_THROTTLE, judge_fleet, judge_gemm
from kiln.judging.rules_ib import judge_ib
from kiln.judging.thresholds import FABRIC_BYTES, Floors, fabric_floor, intra_node_floor
from kiln.judging.verdicts import Action, Verdict

_FABRIC = str(FABRIC_BYTES)
_ABSENT = object()  # a node or job with neither a line nor a file: no result
# A passing node verdict, every field in order, as _rules.node_verdict builds it (no call
# between: 100,000 of them at 12,500 nodes).
_passed = _new_verdict
_NONE = Action.NONE


class LazyResults(Sequence):
    """The run's all-reduce results, each record built from its fields when first read."""

    __slots__ = ("_built", "_rows", "_table")

    def __init__(self, rows: list[tuple[str, Sequence[str]]], table: CompactTable) -> None:
        self._rows, self._table, self._built = rows, table, None

    def _all(self) -> list[AllreduceResult]:
        if self._built is None:
            last = self._table.last
            self._built = [allreduce_record(j, (*rest, last("A", j))) for j, rest in self._rows]
        return self._built

    def __getitem__(self, index):  # type: ignore[override]
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[AllreduceResult]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self._all() == list(other)

    __hash__ = None  # type: ignore[assignment]

    def append(self, item: AllreduceResult) -> None:
        self._all().append(item)
        self._rows.append((item.job, []))  # keeps len() right; the record is already built


def judge_table(
    cluster: Cluster,
    table: CompactTable,
    nodes: Sequence[str],
    jobs: Sequence[str],
    *,
    run_id: str | None = None,
    suite: str | None = None,
    ib: IbRun | None = None,
    not_tested: Mapping[str, str] | None = None,
) -> BurninReport:
    """Judge a run's nodes (`nodes`) and all-reduce jobs (`jobs`, the manifest's) from `table`;
    the same report as analysis.judge over the records. A node or job without a line has no
    result at all (the caller checked that it has no file either): a failure, as load_run's."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _judge(cluster, table, nodes, jobs, run_id, suite, ib, dict(not_tested or {}))
    finally:
        if enabled:
            gc.enable()


def _judge(cluster, table, nodes, jobs, run_id, suite, ib, skip) -> BurninReport:
    gemm = {n: table.gemm.get(n, _ABSENT) for n in nodes}
    records = {}  # node -> its GemmResult, built for every node that is not clean
    for node in cluster.compute:  # as analysis._untested: a result from another host
        line = gemm.get(node.name)
        if line is None or line is _ABSENT or isinstance(line, str):
            continue
        host = line[0]
        if line[1] != "1":
            records[node.name] = record = gemm_record(node.name, table.last("G", node.name))
            host = record.host
        ran = host.split(".")[0]
        if ran and ran != node.name and node.name not in skip:
            skip[node.name] = f"{NOT_TESTED}: its result came from {ran}, not {node.name}"
    lines = table.allreduce
    results = [(job, lines.get(job, _ABSENT)) for job in dict.fromkeys(jobs)]
    missing = [
        (f"allreduce/{job}", f"{NO_RESULT} ({'no output' if line is _ABSENT else line})")
        for job, line in results
        if type(line) is str or line is _ABSENT
    ]
    if missing:
        results = [r for r in results if type(r[1]) is not str and r[1] is not _ABSENT]
    by_job = {f"node-{n.name}": n.name for n in cluster.compute}
    if any(
        (line := lines.get(job)) is not None and type(line) is not str and line[0] not in (node, "")
        for job, node in by_job.items()
    ):  # a node's all-reduce ran elsewhere (rare): in the results' order, as _untested
        for job, line in results:
            node = by_job.get(job)
            if node:
                others = [h for h in line[0].split(",") if h and h != node]
                if others and node not in skip:
                    skip[node] = f"{NOT_TESTED}: its all-reduce ran on {others[0]}, not {node}"
    if skip:
        owned = {f"allreduce/node-{n}" for n in skip}
        results = [r for r in results if by_job.get(r[0]) not in skip]
        missing = [m for m in missing if m[0] not in owned]

    report, cache, floors = start_report(cluster, run_id, suite, skip)
    means: dict[str, list[tuple[str, float]]] = {}
    throttle_ok: dict[str, bool] = {"": True}
    for node in cluster.compute:
        line = gemm.get(node.name)
        if line is None or node.name in skip:
            continue
        f = floors(node.gpu_model)
        report.node_profiles[node.name] = f.profile
        if line is _ABSENT or isinstance(line, str):
            reason = NO_RESULT if line is _ABSENT else f"{NO_RESULT} ({line})"
            report.verdicts.append(_node(node.name, "result", False, C, DRAIN, reason))
            continue
        report.verdicts.append(_node(node.name, "result", True))
        mean = None
        if node.name not in records:
            mean = _clean_node(report, node, line, f, throttle_ok)
        if mean is None:
            record = records.get(node.name) or gemm_record(node.name, table.last("G", node.name))
            mean = judge_gemm(report, node, record, f)
        if mean is not None:
            means.setdefault(f.profile, []).append((node.name, mean))
    for profile_id, rows in means.items():
        judge_fleet(report, rows, cache[profile_id])
    _judge_allreduce(report, cluster, results, floors, table)
    judge_ib(report, cluster, ib, cluster.burnin.ib_write_bw_floor_pct)
    for name, reason in missing:
        report.verdicts.append(
            Verdict("job", name, "result", False, severity=C, action=LOOK,
                    message=f"{name}: {reason}")
        )  # fmt: skip
    if skip:
        report.verdicts = [v for v in report.verdicts if v.node not in skip or v.check == "tested"]
    report.floors = dict(sorted(cache.items()))
    report.sort()
    return report


def _clean_node(report, node, line: Sequence[str], f: Floors, throttle_ok) -> float | None:
    """A clean node's verdicts from its columns, as judge_gemm gives them when no GPU fails;
    None (nothing added) when a GPU fails a threshold or a throttle: judge_gemm judges it."""
    throttle = line[2]
    ok = throttle_ok.get(throttle)
    if ok is None:
        ok = throttle_ok[throttle] = FAILING_THROTTLE.isdisjoint(throttle.split(","))
    if not ok or not line[3]:
        return None
    tflops = list(map(float, line[3].split(",")))  # finite: `clean` says so
    count = len(tflops)
    best, worst, floor = max(tflops), min(tflops), f.gemm_tflops
    relative = best * (1 - f.gemm_relative_pct / 100) if count > 1 else None
    if worst < floor or (relative is not None and worst < relative):
        return None
    name, add = node.name, report.verdicts.append
    report.gpu_tflops[name] = tflops
    expected = node.gpu_count if node.has_gpus else 1
    what = "GPUs" if node.has_gpus else "devices"
    text = f"gemm ran on {count} of {expected} {what}"
    add(_node(name, "gpu_count", count >= expected, C, DRAIN, text, count, expected))
    add(_passed("node", name, "checksum", True, None, None, "", C, _NONE, "", name, ""))
    add(_passed("node", name, "gemm_floor", True, worst, floor, "TFLOPS", W, _NONE, "", name, ""))
    if relative is not None:
        add(_passed("node", name, "gemm_vs_node_best", True, worst, relative, "TFLOPS", W, _NONE,
                    "", name, ""))  # fmt: skip
    add(_passed("node", name, "throttle", True, None, None, "", W, _NONE, "", name, ""))
    return sum(tflops) / count


def _judge_allreduce(report, cluster: Cluster, results, floors, table: CompactTable) -> None:
    """rules_allreduce.judge_allreduce over the fields; a record only for what needs one."""
    pairs: dict[tuple[str, str], float] = {}
    node_floors = {n.name: floors(n.gpu_model) for n in cluster.compute}
    intra = {name: intra_node_floor(f) for name, f in node_floors.items()}
    has_pairs = any(r[1][0].count(",") == 1 for r in results)
    report.allreduce = LazyResults(results, table)
    add = report.verdicts.append
    for job, line in results:
        hosts_text = line[0]
        comma = hosts_text.find(",")
        if comma > 0 and line[5] == "1" and line[7] == "0" and line[8] == _FABRIC:
            a, b = hosts_text[:comma], hosts_text[comma + 1 :]
            if a in node_floors and b in node_floors and "," not in b:  # a correct node pair
                key = (a, b) if a <= b else (b, a)
                busbw = float(line[9] or line[4])  # at FABRIC_BYTES, else the verdict's
                pairs[key] = busbw if key not in pairs else min(pairs[key], busbw)
                continue
        _w, _i, _vb, vbusbw, correct, _r, wrong, size, at = line[1:]
        hosts = hosts_text.split(",") if hosts_text else []
        count = len(hosts)
        if count == 1:
            known = hosts[0] in node_floors
        elif count == 2:
            known = hosts[0] in node_floors and hosts[1] in node_floors
        else:
            known = all(h in node_floors for h in hosts)
        if not known:  # hosts outside the inventory are left out, as judge_allreduce does
            hosts = [h for h in hosts if h in node_floors]
        record = None
        if correct != "1" or (wrong != "0" and int(wrong) != 0):
            record = allreduce_record(job, (*line, table.last("A", job)))
            _judge_correct(report, record, hosts)
        if not hosts:
            continue
        if count == 1:
            floor = intra[hosts[0]]
            if floor.gbs is None:
                continue
            busbw = float(vbusbw)
            if busbw >= floor.gbs:
                add(_passed("node", hosts[0], "allreduce_node", True, busbw, floor.gbs, "GB/s",
                            W, _NONE, "", hosts[0], floor.rule))  # fmt: skip
            else:
                record = record or allreduce_record(job, (*line, table.last("A", job)))
                _judge_node(report, record, hosts[0], floor)
        elif count == 2 and len(hosts) == 2:
            key = (hosts[0], hosts[1]) if hosts[0] <= hosts[1] else (hosts[1], hosts[0])
            if size == _FABRIC:
                busbw = float(at) if at else float(vbusbw)
            else:
                record = record or allreduce_record(job, (*line, table.last("A", job)))
                busbw = record.busbw_at(FABRIC_BYTES)[1]
            pairs[key] = busbw if key not in pairs else min(pairs[key], busbw)
        else:
            record = record or allreduce_record(job, (*line, table.last("A", job)))
            _judge_fabric(report, record, fabric_floor(cluster, hosts), has_pairs)
    if pairs:
        in_pairs = {h for key in pairs for h in key}
        pair_pct = min(100.0, *(node_floors[h].node_relative_pct for h in in_pairs))
        # judge_allreduce passes every pair's hosts in results order; _pair_floor takes the
        # first (or first bare, or first fewest-rails) pair, whose floor does not depend on
        # the order of its two nodes: the pairs' keys, in first-seen order, give the same.
        _judge_pairs(report, pairs, _pair_floor(cluster, list(pairs)), pair_pct)
