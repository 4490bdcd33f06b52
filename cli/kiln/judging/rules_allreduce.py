"""All-reduce rules: inside a node, across nodes, and the pairwise localisation."""

from __future__ import annotations

from kiln.inventory.model import Cluster
from kiln.judging._rules import DRAIN, LOOK, C, W
from kiln.judging._rules import node_verdict as _node
from kiln.judging.pairs import localise, median
from kiln.judging.verdicts import Action, Verdict, num


def judge_allreduce(report, cluster: Cluster, results, floors) -> None:
    """Inside a node: against the floor, drain. Across nodes: against the floor, investigate;
    node pairs: localised (culprit nodes drained, links investigated)."""
    pairs: dict[tuple[str, str], float] = {}
    pair_floor: float | None = None
    pair_pct = 100.0
    node_floors = {n.name: floors(n.gpu_model) for n in cluster.compute}
    results = list(results)
    has_pairs = any(len(a.hosts) == 2 for a in results)
    for a in results:
        report.allreduce.append(a)
        scope = a.scope
        hosts = [h for h in a.hosts if h in node_floors]
        fl = [node_floors[h] for h in hosts]
        gbs = [f.allreduce_busbw_gbs for f in fl if f.allreduce_busbw_gbs]
        floor = min(gbs) if gbs else None
        tool = " (nccl-tests)" if a.source == "nccl-tests" else ""
        if scope == "pair" and len(hosts) == 2:
            a_, b_ = hosts
            key = (a_, b_) if a_ <= b_ else (b_, a_)
            old = pairs.get(key)
            pairs[key] = a.verdict_busbw_gbs if old is None else min(old, a.verdict_busbw_gbs)
            if floor is not None:
                pair_floor = floor if pair_floor is None else min(pair_floor, floor)
            pair_pct = min(pair_pct, fl[0].node_relative_pct, fl[1].node_relative_pct)
        if not a.correct:
            node = hosts[0] if scope == "node" and hosts else None
            subject, action = ("node", DRAIN) if node else ("job", LOOK)
            report.verdicts.append(
                Verdict(
                    subject,
                    node or a.job,
                    "allreduce_correct",
                    False,
                    severity=C,
                    action=action,
                    node=node,
                    message=f"allreduce{tool} sum wrong in {a.job}",
                )
            )
        if floor is None or scope == "pair":
            continue
        ok = a.verdict_busbw_gbs >= floor
        text = (
            "" if ok else (f"allreduce{tool} {num(a.verdict_busbw_gbs)} GB/s < floor {num(floor)}")
        )
        if scope == "node" and hosts:
            report.verdicts.append(
                _node(
                    hosts[0],
                    "allreduce_node",
                    ok,
                    W,
                    DRAIN,
                    text,
                    a.verdict_busbw_gbs,
                    floor,
                    "GB/s",
                )
            )
        else:
            hint = "" if ok or has_pairs else "; run the pairwise pass to localise"
            report.verdicts.append(
                Verdict(
                    "job",
                    a.job,
                    "allreduce_fabric",
                    ok,
                    a.verdict_busbw_gbs,
                    floor,
                    "GB/s",
                    W,
                    LOOK if not ok else Action.NONE,
                    text + hint,
                )
            )
    if pairs:
        _judge_pairs(report, pairs, pair_floor, pair_pct)


def _judge_pairs(report, pairs, floor: float | None, pct: float) -> None:
    threshold = max(floor or 0.0, median(list(pairs.values())) * (1 - pct / 100))
    report.pair_threshold_gbs = threshold
    loc = localise(pairs, threshold)
    add = report.verdicts.append
    for node, tally in sorted(loc.tallies.items()):
        ok = node not in loc.culprit_nodes
        text = (
            ""
            if ok
            else (
                f"allreduce slow in {tally.slow}/{tally.total} node pairs, "
                f"median {num(tally.median_busbw)} GB/s < {num(threshold)}"
            )
        )
        add(
            _node(
                node, "allreduce_pairs", ok, W, DRAIN, text, tally.median_busbw, threshold, "GB/s"
            )
        )
    for a, b, value in loc.culprit_links:
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
                f"allreduce {a}<->{b} {num(value)} GB/s < {num(threshold)}; both "
                "nodes fine with other partners",
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
            )
        )
