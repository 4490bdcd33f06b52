"""All-reduce rules: inside a node, across nodes, and the pairwise localisation.

Floors go by scope (kiln.judging.thresholds) and each verdict names the rule that set its
threshold (`Verdict.rule`): inside a node the profile's intra-node floor (NVLink or PCIe);
across an NVLink domain (an NVL72 rack) the profile's rack-scale floor; across nodes rails x
line rate x efficiency from what the nodes declare, judged at
FABRIC_BYTES; where a node declares no rails, only the fleet: the pairwise pass against the
median of the pairs. A result whose sum was wrong, or whose nccl-tests #wrong columns are not
all 0, fails, naming the implementation that ran (nccl-tests or torch).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from kiln.inventory.model import Cluster
from kiln.judging._rules import DRAIN, LOOK, C, W
from kiln.judging.pairs import localise, median
from kiln.judging.results import AllreduceResult
from kiln.judging.table import AllreduceRow
from kiln.judging.thresholds import (
    DOMAIN_JOB,
    FABRIC_BYTES,
    FLEET,
    RAILS,
    ScopeFloor,
    domain_floor,
    fabric_floor,
    intra_node_floor,
)
from kiln.judging.verdicts import Action, Verdict, num
from kiln.judging.verdicts import node_verdict as _node


def judge_allreduce(report, cluster: Cluster, table, jobs, floors) -> None:
    """Inside a node: against the intra-node floor, drain. Across nodes: against the rails'
    floor, investigate; node pairs: localised (culprit nodes drained, links investigated).
    `jobs`: (job, AllreduceRow) in the order judged; `report.allreduce` gets their records
    when a report or plot reads it (RecordsOf)."""
    pairs: dict[tuple[str, str], float] = {}
    node_floors = {n.name: floors(n.gpu_model) for n in cluster.compute}
    intra = {name: intra_node_floor(f) for name, f in node_floors.items()}
    has_pairs = any(row.hosts.count(",") == 1 for _, row in jobs)  # scope "pair"
    report.allreduce = RecordsOf(table, [job for job, _ in jobs])
    add = report.verdicts.append
    for job, row in jobs:  # 100,000 at 12,500 nodes: no record, no call per healthy pair
        if row.correct == "1" and row.wrong == "0":
            a, comma, b = row.hosts.partition(",")
            if (
                comma
                and "," not in b
                and a in node_floors
                and b in node_floors
                and not job.startswith(DOMAIN_JOB)
            ):  # a correct pair of inventory nodes: its figure only
                key = (a, b) if a <= b else (b, a)
                busbw = row.busbw_at_fabric()[1]
                old = pairs.get(key)
                pairs[key] = busbw if old is None or busbw < old else old
                continue
        hosts = row.hosts.split(",") if row.hosts else []
        count = len(hosts)
        known = [h for h in hosts if h in node_floors]  # hosts outside the inventory: left out
        if row.correct != "1" or (row.wrong != "0" and int(row.wrong) != 0):
            _judge_correct(report, job, row, known)
        if not known:
            continue
        if job.startswith(DOMAIN_JOB):  # scope "NVLink domain": the rack's own floor
            _judge_domain(report, job, row, domain_floor(node_floors[known[0]]))
        elif count == 1:  # scope "node"
            floor = intra[known[0]]
            if floor.gbs is not None:
                busbw = float(row.verdict_busbw)
                ok = busbw >= floor.gbs
                text = "" if ok else f"{row.label} {num(busbw)} GB/s < floor {num(floor.gbs)}"
                add(_node(known[0], "allreduce_node", ok, W, DRAIN, text, busbw, floor.gbs,
                          "GB/s", floor.rule))  # fmt: skip
        elif count == 2 and len(known) == 2:  # scope "pair", with a wrong sum
            key = (known[0], known[1]) if known[0] <= known[1] else (known[1], known[0])
            busbw = row.busbw_at_fabric()[1]
            pairs[key] = busbw if key not in pairs else min(pairs[key], busbw)
        else:
            _judge_fabric(report, job, row, fabric_floor(cluster, known), has_pairs)
    if pairs:
        # A pair's floor does not depend on the order of its two nodes: the pairs' keys, in
        # first-seen order, stand for the results' hosts.
        _judge_pairs(report, pairs, *pair_threshold(cluster, pairs, floors))


class RecordsOf(Sequence):
    """The run's all-reduce results, each record built from the table when first read (a
    report, a plot): judging 100,000 of them reads their rows only."""

    __slots__ = ("_built", "_jobs", "_table")

    def __init__(self, table, jobs: list[str]) -> None:
        self._table, self._jobs, self._built = table, jobs, None

    def _all(self) -> list[AllreduceResult]:
        if self._built is None:
            self._built = [self._table.allreduce_record(job) for job in self._jobs]
        return self._built

    def __getitem__(self, index):  # type: ignore[override]
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[AllreduceResult]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self._all() == list(other)

    __hash__ = None  # type: ignore[assignment]

    def append(self, item: AllreduceResult) -> None:
        self._all().append(item)
        self._jobs.append(item.job)


def _at(size: int) -> str:
    """' at 1 GiB' when a result was judged at another size than FABRIC_BYTES."""
    if size == FABRIC_BYTES:
        return ""
    return f" at {size >> 30} GiB" if size >= 1 << 30 else f" at {size >> 20} MiB"


def _judge_correct(report, job: str, row: AllreduceRow, hosts: list[str]) -> None:
    wrong = int(row.wrong)
    node = hosts[0] if row.hosts.count(",") == 0 and hosts else None  # scope "node"
    subject, action = ("node", DRAIN) if node else ("job", LOOK)
    what = f"{wrong} wrong values (#wrong)" if wrong else "sum wrong"
    report.verdicts.append(
        Verdict(
            subject,
            node or job,
            "allreduce_correct",
            False,
            float(wrong) if wrong else None,
            0.0 if wrong else None,
            "values" if wrong else "",
            severity=C,
            action=action,
            node=node,
            message=f"{row.label} {what} in {job}",
        )
    )


def _judge_fabric(report, job: str, row: AllreduceRow, floor: ScopeFloor, has_pairs: bool) -> None:
    size, busbw = row.busbw_at_fabric()
    if floor.gbs is None:  # no rails: the fleet judges (the pairwise pass), not a floor
        text = f"{row.label} {num(busbw)} GB/s{_at(size)}: no floor ({floor.basis})"
        if has_pairs:
            text += "; the node pairs are judged against the fleet's median"
        verdict = Verdict("job", job, "allreduce_fabric", True, busbw, None, "GB/s", W)
        report.verdicts.append(_with(verdict, FLEET, text))
        return
    ok = busbw >= floor.gbs
    text = ""
    if not ok:
        text = f"{row.label} {num(busbw)} GB/s{_at(size)} < {num(floor.gbs)} ({floor.basis})"
        text += "" if has_pairs else "; run the pairwise pass to localise"
    action = Action.NONE if ok else LOOK
    verdict = Verdict("job", job, "allreduce_fabric", ok, busbw, floor.gbs, "GB/s", W, action)
    report.verdicts.append(_with(verdict, floor.rule, text))


def _judge_domain(report, job: str, row: AllreduceRow, floor: ScopeFloor) -> None:
    """An NVLink domain below its floor: the rack is investigated (its switch trays, a tray's
    links), no tray drained on this figure alone: the per-node results name a bad tray."""
    size, busbw = row.busbw_at_fabric()
    ok = floor.gbs is None or busbw >= floor.gbs
    text = ""
    if not ok:
        text = (f"{row.label} {num(busbw)} GB/s{_at(size)} across NVLink domain "
                f"{job.removeprefix(DOMAIN_JOB)} < {num(floor.gbs)} ({floor.basis})")  # fmt: skip
    verdict = Verdict("job", job, "allreduce_domain", ok, busbw, floor.gbs, "GB/s", W,
                      Action.NONE if ok else LOOK)  # fmt: skip
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


def pair_threshold(
    cluster: Cluster, pairs: Mapping[tuple[str, str], float], floors
) -> tuple[float, str, str]:
    """(GB/s, rule, why) below which a node pair is slow: the rails' floor, or `pct` below the
    pairs' median where that is higher (or there is no floor). One rule for the burn-in's
    rounds (kiln.burnin.pairwise) and for judging them."""
    in_pairs = {h for key in pairs for h in key}
    pct = min(100.0, *(floors(cluster.node(h).gpu_model).node_relative_pct for h in in_pairs))
    floor = _pair_floor(cluster, [list(k) for k in pairs])
    # The fleet's median says something from 3 pairs on (the pairwise pass runs from 3 nodes).
    fleet = len(pairs) >= 3
    relative = median(list(pairs.values())) * (1 - pct / 100) if fleet else 0.0
    if floor.gbs is not None and floor.gbs >= relative:
        return floor.gbs, RAILS, floor.basis
    why = f"{pct:g}% below the pairs' median" if fleet else "no floor, no fleet to compare"
    return relative, FLEET, why


def _judge_pairs(report, pairs, threshold: float, rule: str, why: str) -> None:
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
