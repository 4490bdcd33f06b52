"""Where a slow fabric's fault is: a node, one rail of a node, or a leaf switch's uplink.

A rail-optimised fabric: every node has one HCA per rail, each cabled to that rail's leaf of
the node's group (a scalable unit); leaves reach each other through spines. A per-rail test
between two nodes of one leaf crosses only their two HCAs, cables and leaf ports; between two
leaves it also crosses both leaves' uplinks. So one slow measurement between a and b on rail r
points at: node a or b (slow on every rail), rail r of a or of b (its HCA, cable or leaf
port), or, across leaves, the uplink of either leaf on rail r. The Locator narrows that down in
rounds of disjoint pairs (each a matching: one bounded Slurm job per round):

    locator = Locator(fabric, threshold_gbs)
    pairs = locator.first_round()              # every node, a partner each (pair_schedule)
    locator.record(measure(pairs))             # {(a, b): {rail: GB/s}}
    while (pairs := locator.next_round()):     # at most two more
        locator.record(measure(pairs))
    found = locator.findings()                 # nodes, rails, uplinks named; drain: nodes only

Round two tests each node of a slow measurement against a partner on its own leaf (a node of
no slow measurement if the leaf has one, else another suspect): a fault that follows the node
there (every rail slow: the node; one rail slow: that rail) is named once two different
partners saw it; a node slow with nobody on its leaf is cleared. Round three takes each slow
measurement across leaves whose two nodes are cleared, and tests one cleared node of each of
its leaves against a cleared node of a third leaf on that rail: the leaf whose test is slow
again has the slow uplink. Nothing is named from one measurement; nobody is drained for an
uplink. Pure: measurements in, findings out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from kiln.judging.pairs import pair_schedule

Pair = tuple[str, str]
Measurements = Mapping[Pair, Mapping[int, float]]  # (a, b) -> rail -> GB/s
MAX_ROUNDS = 3


@dataclass(frozen=True)
class Fabric:
    """Each node's leaf group (its rails' leaves are `<group>/rail<r>`), and the rail count."""

    groups: Mapping[str, str]  # node -> its scalable unit (the leaves it is cabled to)
    rails: int
    # node -> the rails it can test (kiln.burnin.ib.usable_rails); None: every node all of them
    node_rails: Mapping[str, frozenset[int]] | None = None

    def leaf(self, node: str, rail: int) -> str:
        return f"{self.groups[node]}/rail{rail}"

    @classmethod
    def of_rails(cls, groups: Mapping[str, str], node_rails: Mapping[str, Iterable[int]]) -> Fabric:
        """The fabric of nodes that can test the rails given each (the rail count from them)."""
        rails = {node: frozenset(found) for node, found in node_rails.items()}
        count = 1 + max((r for found in rails.values() for r in found), default=-1)
        return cls(groups, count, rails)

    def rails_of(self, node: str) -> frozenset[int]:
        if self.node_rails is None:
            return frozenset(range(self.rails))
        return self.node_rails.get(node, frozenset())


@dataclass
class Findings:
    nodes: dict[str, str] = field(default_factory=dict)  # node -> why
    rails: dict[tuple[str, int], str] = field(default_factory=dict)  # (node, rail) -> why
    uplinks: dict[str, str] = field(default_factory=dict)  # leaf -> why
    unexplained: list[tuple[str, str, int, float]] = field(default_factory=list)
    rounds: int = 0

    def drain(self) -> set[str]:
        """The nodes to drain: a bad node, or a node with a bad rail (never for an uplink)."""
        return set(self.nodes) | {node for node, _ in self.rails}


@dataclass
class Locator:
    fabric: Fabric
    threshold: float  # GB/s a rail must reach between two healthy nodes
    rounds: int = 0
    # (a, b, rail, GB/s) of every measurement, in the order recorded
    seen: list[tuple[str, str, int, float]] = field(default_factory=list)
    cleared: set[tuple[str, int]] = field(default_factory=set)  # (node, rail) proven healthy
    found: Findings = field(default_factory=Findings)

    def first_round(self) -> list[Pair]:
        return pair_schedule(sorted(self.fabric.groups), rounds=1)[0]

    def record(self, measured: Measurements) -> None:
        self.rounds += 1
        for (a, b), rails in measured.items():
            for rail, gbs in rails.items():
                self.seen.append((a, b, rail, gbs))
                if gbs >= self.threshold:
                    self.cleared.update({(a, rail), (b, rail)})
        self._name_node_faults()

    # -- what the measurements say ---------------------------------------------------------

    def _slow(self) -> list[tuple[str, str, int, float]]:
        return [m for m in self.seen if m[3] < self.threshold]

    def _explained(self, a: str, b: str, rail: int) -> bool:
        named = self.found
        return any(n in named.nodes or (n, rail) in named.rails for n in (a, b)) or any(
            self.fabric.leaf(n, rail) in named.uplinks for n in (a, b)
        )

    def _slow_between_cleared_leaves(self) -> Iterator[tuple[str, str, int]]:
        """(a, b, rail) of each slow measurement across two leaves whose two nodes are cleared
        on that rail: what is left to blame is either leaf's uplink."""
        for a, b, rail, _ in self._slow():
            if (
                self.fabric.leaf(a, rail) != self.fabric.leaf(b, rail)
                and {(a, rail), (b, rail)} <= self.cleared
            ):
                yield a, b, rail

    def _name_node_faults(self) -> None:
        """A node slow on every rail with two partners; else a rail slow with two partners."""
        slow_with: dict[tuple[str, int], set[str]] = {}
        for a, b, rail, _ in self._slow():
            slow_with.setdefault((a, rail), set()).add(b)
            slow_with.setdefault((b, rail), set()).add(a)
        for node in sorted({n for n, _ in slow_with}):
            partners = [slow_with.get((node, r), set()) for r in sorted(self.fabric.rails_of(node))]
            every = set.intersection(*partners) if partners else set()
            if len(every) >= 2:
                self.found.nodes[node] = f"slow on every rail with {len(every)} partners"
        for (node, rail), others in sorted(slow_with.items()):
            if node in self.found.nodes or len(others) < 2 or (node, rail) in self.cleared:
                continue
            self.found.rails[(node, rail)] = f"rail {rail} slow with {len(others)} partners"

    # -- the next round ----------------------------------------------------------------------

    def next_round(self) -> list[Pair]:
        """Round two (each suspect on its own leaf), then three (uplinks); [] when done."""
        if self.rounds == 1:
            return self._own_leaf_round()
        if self.rounds == 2:
            return self._uplink_round()
        return []

    def _suspects(self) -> dict[str, set[int]]:
        """Each node of an unexplained slow measurement, with the rails it was slow on."""
        found: dict[str, set[int]] = {}
        for a, b, rail, _ in self._slow():
            if not self._explained(a, b, rail):
                for node in (a, b):
                    found.setdefault(node, set()).add(rail)
        return dict(sorted(found.items()))

    def _own_leaf_round(self) -> list[Pair]:
        busy: set[str] = set()
        pairs = []
        slow_nodes = {n for m in self._slow() for n in m[:2]}
        by_group: dict[str, list[str]] = {}
        for node in sorted(self.fabric.groups):
            by_group.setdefault(self.fabric.groups[node], []).append(node)
        for node, rails in self._suspects().items():
            if node in busy:
                continue
            # only a partner that can test every rail the suspect was slow on can confirm it
            free = [
                n for n in by_group[self.fabric.groups[node]]
                if n != node and n not in busy and rails <= self.fabric.rails_of(n)
            ]  # fmt: skip
            # a node of no slow measurement if its leaf has one, else another suspect
            partner = next((n for n in free if n not in slow_nodes), free[0] if free else None)
            if partner is not None:
                pairs.append(_ordered(node, partner))
                busy.update((node, partner))
        return pairs

    def _uplink_round(self) -> list[Pair]:
        """For each slow measurement across leaves with both ends cleared on its rail: one
        cleared node of each leaf against a cleared node of a third, unimplicated leaf."""
        implicated: dict[str, int] = {}  # leaf -> its rail
        for a, b, rail in self._slow_between_cleared_leaves():
            if not self._explained(a, b, rail):
                for node in (a, b):
                    implicated[self.fabric.leaf(node, rail)] = rail
        busy: set[str] = set()
        pairs = []
        for leaf, rail in sorted(implicated.items()):
            cleared = [n for n in sorted(self.fabric.groups)
                       if n not in busy and (n, rail) in self.cleared]  # fmt: skip
            here = next((n for n in cleared if self.fabric.leaf(n, rail) == leaf), None)
            elsewhere = next(
                (n for n in cleared if self.fabric.leaf(n, rail) not in implicated), None
            )
            if here is not None and elsewhere is not None:
                pairs.append(_ordered(here, elsewhere))
                busy.update((here, elsewhere))
        return pairs

    # -- the answer -------------------------------------------------------------------------

    def findings(self) -> Findings:
        """What the rounds named; an uplink is named from round three's slow tests."""
        if self.rounds >= 3:
            self._name_uplinks()
        found = self.found
        found.rounds = self.rounds
        found.unexplained = [m for m in self._slow() if not self._explained(*m[:3])]
        return found

    def _name_uplinks(self) -> None:
        slow_across: dict[str, set[str]] = {}  # leaf -> the other leaves it was slow with
        for a, b, rail in self._slow_between_cleared_leaves():
            leaves = (self.fabric.leaf(a, rail), self.fabric.leaf(b, rail))
            slow_across.setdefault(leaves[0], set()).add(leaves[1])
            slow_across.setdefault(leaves[1], set()).add(leaves[0])
        for leaf, others in sorted(slow_across.items()):
            if len(others) >= 2:
                self.found.uplinks[leaf] = f"slow to {len(others)} other leaves, fine within"


def _ordered(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)
