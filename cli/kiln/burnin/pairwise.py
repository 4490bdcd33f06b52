"""The pairwise pass: where a slow fabric all-reduce's fault is, in the rounds the Locator picks.

    pass_ = PairwisePass(cluster, members, floors)
    pairs = pass_.first()            # round one: every node with one partner (a matching)
    pass_.record({pair: busbw})      # the round's 2-node all-reduce results, GB/s at 8 GiB
    pairs = pass_.next()             # round two: each suspect against a partner on its own
                                     # leaf; three: the leaves' uplinks; []: nothing left to ask

kiln.judging.locate decides the rounds (at most three, each one Slurm phase of disjoint pairs,
instead of max(3, log2 N) rounds of everyone): a node slow with two different partners is named,
its first partner cleared by a third node; nobody is drained for an uplink. A pair is slow
below the same threshold judging applies afterwards (kiln.judging.rules_allreduce.
pair_threshold, fixed on round one's results: the rails' floor, or the fleet's median less the
profile's node_relative_pct), so the rounds ask about what the report will call slow. A fleet of
3 to 5 nodes without rails has neither: round one's one or two pairs set no median, so it runs
the fixed schedule's later rounds instead (pair_schedule: each node meets up to three partners,
as before the Locator), and judging compares them all. One rail per pair here: the all-reduce
crosses all of a node's rails (per-rail faults are the InfiniBand rounds'). A pair whose job
left no result counts as 0 GB/s: a pair that hangs is slow. Pure: `result_of` reads a
document the campaign hands it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from kiln.inventory import Cluster
from kiln.judging.locate import Fabric, Locator
from kiln.judging.pairs import pair_schedule
from kiln.judging.results import AllreduceResult, ResultError, allreduce_from_doc
from kiln.judging.rules_allreduce import pair_threshold
from kiln.judging.thresholds import FABRIC_BYTES, FLEET, ScopeFloor

Pair = tuple[str, str]


def result_of(job: str, document: str | None) -> AllreduceResult | None:
    """An all-reduce job's result from its document, None when it left none (or none
    readable)."""
    if document is None:
        return None
    try:
        return allreduce_from_doc(job, json.loads(document))
    except (ValueError, ResultError):
        return None


def ring_slow(result: AllreduceResult | None, floor: ScopeFloor, name: str, say) -> bool:
    """Whether the pairwise pass runs after the fabric ring `name`: it missed its rails' floor
    (or was wrong, or left no result: the pairs tell which nodes or links hang), or there is
    no floor (a node declares no rails: the pairs are the fleet-relative rule)."""
    if result is None:
        return True
    busbw = result.busbw_at(FABRIC_BYTES)[1]
    below = floor.gbs is not None and busbw < floor.gbs
    slow = not result.correct or result.wrong > 0 or floor.gbs is None or below
    if slow:
        why = "below its floor" if below else "no floor: the pairs compare it with the fleet"
        say(f"{name}: {busbw:g} GB/s, {why}")
    return slow


class PairwisePass:
    def __init__(self, cluster: Cluster, members: Sequence[str], floors: Callable) -> None:
        self.cluster, self.members, self.floors = cluster, sorted(members), floors
        leaves = {m: cluster.node(m).leaf_switch for m in members}
        self.fabric = Fabric(groups=leaves, rails=1)
        self.locator: Locator | None = None
        self.schedule: list[list[Pair]] | None = None  # a small fleet's fixed later rounds
        self.threshold: float | None = None
        self.rounds = 0

    def first(self) -> list[Pair]:
        schedule = pair_schedule(self.members, rounds=1)
        return schedule[0] if schedule else []

    def record(self, busbw: Mapping[Pair, float]) -> None:
        self.rounds += 1
        if self.locator is None and self.schedule is None:  # round one: how to read the rest
            self.threshold, rule, _why = pair_threshold(self.cluster, busbw, self.floors)
            if rule == FLEET and len(busbw) < 3:  # no floor, no median: compare them all later
                self.schedule = pair_schedule(self.members)[1:]
            else:
                self.locator = Locator(self.fabric, self.threshold)
        if self.locator is not None:
            self.locator.record({pair: {0: value} for pair, value in busbw.items()})

    def next(self) -> list[Pair]:
        if self.schedule is not None:
            return self.schedule.pop(0) if self.schedule else []
        return self.locator.next_round() if self.locator is not None else []
