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
profile's node_relative_pct), so the rounds ask about what the report will call slow. One rail
per pair here: the all-reduce crosses all of a node's rails (per-rail faults are the
InfiniBand rounds'). A pair whose job left no result counts as 0 GB/s: a pair that hangs is
slow. Pure: results in, pairs out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kiln.inventory import Cluster
from kiln.judging.locate import Fabric, Locator
from kiln.judging.pairs import pair_schedule
from kiln.judging.rules_allreduce import pair_threshold

Pair = tuple[str, str]


class PairwisePass:
    def __init__(self, cluster: Cluster, members: Sequence[str], floors: Callable) -> None:
        self.cluster, self.members, self.floors = cluster, list(members), floors
        leaves = {m: cluster.node(m).leaf_switch for m in members}
        self.fabric = Fabric(groups=leaves, rails=1)
        self.locator: Locator | None = None
        self.threshold: float | None = None

    def first(self) -> list[Pair]:
        schedule = pair_schedule(sorted(self.members), rounds=1)
        return schedule[0] if schedule else []

    def record(self, busbw: Mapping[Pair, float]) -> None:
        if self.locator is None:  # round one sets the threshold every round is read against
            self.threshold = pair_threshold(self.cluster, busbw, self.floors)[0]
            self.locator = Locator(self.fabric, self.threshold)
        self.locator.record({pair: {0: value} for pair, value in busbw.items()})

    def next(self) -> list[Pair]:
        return self.locator.next_round() if self.locator is not None else []

    @property
    def rounds(self) -> int:
        return self.locator.rounds if self.locator is not None else 0
