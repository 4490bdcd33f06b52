"""All-reduce rules: inside a node, across nodes, and the pairwise localisation.

Floors go by scope (kiln.judging.thresholds) and each verdict names the rule that set its
threshold (`Verdict.rule`): inside a node the profile's intra-node floor (NVLink or PCIe);
across nodes rails x line rate x efficiency from what the nodes declare, judged at
FABRIC_BYTES; where a node declares no rails, only the fleet: the pairwise pass against the
median of the pairs. A result whose sum was wrong, or whose nccl-tests #wrong columns are not
all 0, fails, naming the implementation that ran (nccl-tests or torch).
"""

from __future__ import annotations

from kiln.inventory.model import Cluster
from kiln.judging._rules import DRAIN, LOOK, C, W
from kiln.judging._rules import node_verdict as _node
from kiln.judging.pairs import localise, median
from kiln.judging.results import AllreduceResult
from kiln.judging.thresholds import (
    FABRIC_BYTES,
    FLEET,
    RAILS,
    ScopeFloor,
    fabric_floor,
    intra_node_floor,
)
from kiln.judging.verdicts import Action, Verdict, num


def judge_allreduce(report, cluster: Cluster, results, floors) -> None:
    """Inside a node: against the intra-node floor, drain. Across nodes: against the rails'
    floor, investigate; node pairs: localised (culprit nodes drained, links investigated)."""
    pairs: dict[tuple[str, str], float] = {}
    pair_hosts: list[list[str]] = []
    node_floors = {n.name: floors(n.gpu_model) for n in cluster.compute}
    results = list(results)
    has_pairs = any(len(a.hosts) == 2 for a in results)  # scope "pair"
    add = report.allreduce.append
    for a in results:  # 100,000 at 12,500 nodes: scope as len(a.hosts), no call per result
        add(a)
        count = len(a.hosts)
        hosts = [h for h in a.hosts if h in node_floors]
        if not a.correct or a.wrong != 0:
            _judge_correct(report, a, hosts)
        if not hosts:
            continue
        if count == 1:  # scope "node"
            _judge_node(report, a, hosts[0], intra_node_floor(node_floors[hosts[0]]))
        elif count == 2 and len(hosts) == 2:  # scope "pair"
            key = (hosts[0], hosts[1]) if hosts[0] <= hosts[1] else (hosts[1], hosts[0])
            busbw = a.busbw_at(FABRIC_BYTES)[1]
            pairs[key] = busbw if key not in pairs else min(pairs[key], busbw)
            pair_hosts.append(hosts)
        else:
            _judge_fabric(report, a, fabric_floor(cluster, hosts), has_pairs)
    if pairs:
        in_pairs = {h for key in pairs for h in key}
        pair_pct = min(100.0, *(node_floors[h].node_relative_pct for h in in_pairs))
        _judge_pairs(report, pairs, _pair_floor(cluster, pair_hosts), pair_pct)


def _tool(a: AllreduceResult) -> str:
    return f"allreduce ({a.implementation})"


def _at(size: int) -> str:
    """' at 1 GiB' when a result was judged at another size than FABRIC_BYTES."""
    if size == FABRIC_BYTES:
        return ""
    return f" at {size >> 30} GiB" if size >= 1 << 30 else f" at {size >> 20} MiB"


def _judge_correct(report, a: AllreduceResult, hosts: list[str]) -> None:
    if a.correct and a.wrong == 0:
        return
    node = hosts[0] if a.scope == "node" and hosts else None
    subject, action = ("node", DRAIN) if node else ("job", LOOK)
    what = f"{a.wrong} wrong values (#wrong)" if a.wrong else "sum wrong"
    report.verdicts.append(
        Verdict(
            subject,
            node or a.job,
            "allreduce_correct",
            False,
            float(a.wrong) if a.wrong else None,
            0.0 if a.wrong else None,
            "values" if a.wrong else "",
            severity=C,
            action=action,
            node=node,
            message=f"{_tool(a)} {what} in {a.job}",
        )
    )


def _judge_node(report, a: AllreduceResult, node: str, floor: ScopeFloor) -> None:
    if floor.gbs is None:
        return
    ok = a.verdict_busbw_gbs >= floor.gbs
    text = "" if ok else f"{_tool(a)} {num(a.verdict_busbw_gbs)} GB/s < floor {num(floor.gbs)}"
    measured = a.verdict_busbw_gbs
    report.verdicts.append(
        _node(node, "allreduce_node", ok, W, DRAIN, text, measured, floor.gbs, "GB/s", floor.rule)
    )


def _judge_fabric(report, a: AllreduceResult, floor: ScopeFloor, has_pairs: bool) -> None:
    size, busbw = a.busbw_at(FABRIC_BYTES)
    if floor.gbs is None:  # no rails: the fleet judges (the pairwise pass), not a floor
        text = f"{_tool(a)} {num(busbw)} GB/s{_at(size)}: no floor ({floor.basis})"
        if has_pairs:
            text += "; the node pairs are judged against the fleet's median"
        verdict = Verdict("job", a.job, "allreduce_fabric", True, busbw, None, "GB/s", W)
        report.verdicts.append(_with(verdict, FLEET, text))
        return
    ok = busbw >= floor.gbs
    text = ""
    if not ok:
        text = f"{_tool(a)} {num(busbw)} GB/s{_at(size)} < {num(floor.gbs)} ({floor.basis})"
        text += "" if has_pairs else "; run the pairwise pass to localise"
    action = Action.NONE if ok else LOOK
    verdict = Verdict("job", a.job, "allreduce_fabric", ok, busbw, floor.gbs, "GB/s", W, action)
    report.verdicts.append(_with(verdict, floor.rule, text))


def _with(v: Verdict, rule: str, message: str | None = None) -> Verdict:
    """The verdict naming the rule that judged it (and, for the fabric, its message)."""
    return v._replace(rule=rule, message=v.message if message is None else message)


def _pair_floor(cluster: Cluster, pairs: list[list[str]]) -> ScopeFloor:
    """One threshold for every pair: the lowest rails floor, or none if a pair has none (the
    first such pair's, which names its bare node). A pair's floor depends only on its nodes'
    rails, so the floor is computed for the one pair that sets it, not for all 87,500 pairs
    of a 12,500-node fleet (each would build a map of the whole inventory)."""
    if not pairs:
        return ScopeFloor(None, FLEET)
    rails = {n.name: len(n.ib_hcas) for n in cluster.compute}
    if not cluster.ib.link_rate_gbps:
        return fabric_floor(cluster, pairs[0])  # no pair has a floor: the first says why
    lowest = min(rails.values())
    if lowest == 0:
        bare = next((p for p in pairs if not rails[p[0]] or not rails[p[1]]), None)
        if bare is not None:
            return fabric_floor(cluster, bare)
    # The first pair with the fewest rails: a node of the inventory with the fewest of all is
    # usually in the first pair (one look, not 87,500); else the pair min() picks, as before.
    first = next((p for p in pairs if rails[p[0]] == lowest or rails[p[1]] == lowest), None)
    if first is not None:
        return fabric_floor(cluster, first)
    return fabric_floor(cluster, min(pairs, key=lambda p: min(rails[p[0]], rails[p[1]])))


def _judge_pairs(report, pairs, floor: ScopeFloor, pct: float) -> None:
    # The fleet's median says something from 3 pairs on (the pairwise pass runs from 3 nodes).
    fleet = len(pairs) >= 3
    relative = median(list(pairs.values())) * (1 - pct / 100) if fleet else 0.0
    if floor.gbs is not None and floor.gbs >= relative:
        threshold, rule, why = floor.gbs, RAILS, floor.basis
    else:
        why = f"{pct:g}% below the pairs' median" if fleet else "no floor, no fleet to compare"
        threshold, rule = relative, FLEET
    report.pair_threshold_gbs = threshold
    loc = localise(pairs, threshold)
    add = report.verdicts.append
    for node, tally in sorted(loc.tallies.items()):
        ok = node not in loc.culprit_nodes
        shown: float | None = threshold
        text = ""
        if not ok:
            text = (
                f"allreduce slow in {tally.slow}/{tally.total} node pairs, "
                f"median {num(tally.median_busbw)} GB/s < {num(threshold)} ({why})"
            )
        elif tally.slow:  # not blamed: its slow pairs are its partners' or their links'
            shown = None if tally.median_busbw < threshold else threshold
            text = f"slow in {tally.slow}/{tally.total} node pairs: not this node's alone"
        add(
            _node(
                node, "allreduce_pairs", ok, W, DRAIN, text, tally.median_busbw, shown, "GB/s", rule
            )
        )
    for a, b, value in loc.culprit_links:
        alone = "two nodes only: a node cannot be told from the link"
        why_link = alone if len(pairs) == 1 else "both nodes fine with other partners"
        add(
            Verdict(
                "link",
                f"{a}<->{b}",
                "allreduce_link",
                False,
                value,
                threshold,
                "GB/s",
                W,
                LOOK,
                f"allreduce {a}<->{b} {num(value)} GB/s < {num(threshold)} ({why}); {why_link}",
                rule=rule,
            )
        )
    if loc.fabric_wide:
        add(
            Verdict(
                "fabric",
                "fabric",
                "allreduce_pairs",
                False,
                None,
                threshold,
                "GB/s",
                C,
                LOOK,
                f"{len(loc.slow_pairs)} of {len(pairs)} node pairs slow: a "
                "fabric-wide problem, no node drained",
                rule=rule,
            )
        )
