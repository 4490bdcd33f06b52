"""Pairwise localisation: which nodes or links make a multi-node all-reduce slow.

`pair_schedule` builds rounds of disjoint node pairs with the circle method of round-robin
tournaments: every round is a matching (all its pairs run at once, one 2-node all-reduce
each), and over k rounds every node meets k different partners. k defaults to
max(3, ceil(log2 N)): enough partners to tell a bad node (slow with everyone) from a bad link
(slow with one partner) at 12,500 nodes in 14 rounds, instead of the N-1 rounds of all pairs.

`localise` reads the pair results: a node is a culprit when at least two of its pairs, and more
than half, are slow (pairs with an already found culprit left out); a slow pair with no
culprit at either end is a link to investigate; when most nodes look guilty the problem is
the fabric as a whole (nobody is drained for it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kiln.judging.results import builder

Pair = tuple[str, str]


def default_rounds(count: int) -> int:
    if count < 2:
        return 0
    most = count - 1 if count % 2 == 0 else count
    return min(most, max(3, math.ceil(math.log2(count))))


def pair_schedule(nodes: Sequence[str], rounds: int | None = None) -> list[list[Pair]]:
    """Rounds of disjoint pairs; with an odd count one node sits out each round."""
    players: list[str | None] = list(nodes)
    if len(players) % 2:
        players.append(None)  # the bye
    count = len(players)
    total = default_rounds(len(nodes)) if rounds is None else min(rounds, count - 1)
    fixed, ring = players[0], players[1:]
    schedule = []
    for r in range(total):
        turn = [fixed, *ring[r:], *ring[:r]]
        matches = []
        for i in range(count // 2):
            a, b = turn[i], turn[count - 1 - i]
            if a is not None and b is not None:
                matches.append((a, b) if a <= b else (b, a))
        schedule.append(matches)
    return schedule


@dataclass(frozen=True, slots=True)
class NodeTally:
    slow: int
    total: int
    median_busbw: float


_new_tally = builder(NodeTally)  # one per node: 12,500 at scale, without the frozen __init__


@dataclass
class Localisation:
    threshold: float
    slow_pairs: list[tuple[str, str, float]] = field(default_factory=list)
    culprit_nodes: dict[str, NodeTally] = field(default_factory=dict)
    culprit_links: list[tuple[str, str, float]] = field(default_factory=list)
    tallies: dict[str, NodeTally] = field(default_factory=dict)
    fabric_wide: bool = False

    @property
    def clean(self) -> bool:
        return not self.slow_pairs


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _partners(busbw: Mapping[Pair, float], nodes: set[str]) -> dict[str, list[tuple[str, float]]]:
    """Node -> (partner, value) of each of its pairs, for `nodes` only."""
    found: dict[str, list[tuple[str, float]]] = {node: [] for node in nodes}
    for (a, b), value in busbw.items():
        if a in found:
            found[a].append((b, value))
        if b in found:
            found[b].append((a, value))
    return found


def localise(busbw: Mapping[Pair, float], threshold: float) -> Localisation:
    """Judge pair results (busbw GB/s per node pair) against one threshold.

    Culprits are chosen greedily, most-often-slow first, and a pair with an already chosen
    culprit no longer counts against its partner (explaining away): a node that met a bad node
    and a bad link is not blamed for either.
    """
    result = Localisation(threshold=threshold)
    values: dict[str, list[float]] = {}  # node -> its pairs' values
    slow_count: dict[str, int] = {}
    for (a, b), value in busbw.items():  # 87,500 pairs at 12,500 nodes: written out
        known = values.get(a)
        if known is None:
            values[a] = [value]
        else:
            known.append(value)
        known = values.get(b)
        if known is None:
            values[b] = [value]
        else:
            known.append(value)
        if value < threshold:
            result.slow_pairs.append((a, b, value))
            slow_count[a] = slow_count.get(a, 0) + 1
            slow_count[b] = slow_count.get(b, 0) + 1
    tally = _new_tally
    for node, vals in values.items():
        result.tallies[node] = tally(slow_count.get(node, 0), len(vals), median(vals))

    def suspicion(node: str) -> tuple[float, int, str]:
        tally = result.tallies[node]
        return (-tally.slow / tally.total, -tally.slow, node)

    suspects = sorted((n for n, t in result.tallies.items() if t.slow >= 2), key=suspicion)
    # Each suspect's partners and values, in the pairs' order; only when there is a suspect
    # (a healthy fleet has none, and building them for 12,500 nodes is half this function).
    partners = _partners(busbw, set(suspects)) if suspects else {}
    for node in suspects:
        others = [
            value < threshold
            for partner, value in partners[node]
            if partner not in result.culprit_nodes
        ]
        if sum(others) >= 2 and sum(others) * 2 > len(others):
            result.culprit_nodes[node] = result.tallies[node]
    if len(values) >= 4 and len(result.culprit_nodes) * 2 > len(values):
        result.fabric_wide = True
        result.culprit_nodes = {}
        return result
    for a, b, value in result.slow_pairs:
        if a not in result.culprit_nodes and b not in result.culprit_nodes:
            result.culprit_links.append((a, b, value))
    return result
