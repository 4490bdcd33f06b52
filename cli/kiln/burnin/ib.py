"""InfiniBand in a burn-in campaign: which node pairs run ib_write_bw, on which rails.

    views = parse_sysfs_dump(text)            # each HCA node's sysfs dump (kiln.fabric.links)
    pass_ = IbPass(cluster, hcas, views, ...) # the rounds the Locator picks, one at a time:
    pairs = pass_.first()                     #   every node with one peer, on their common rails
    pass_.record(layout, pairs)               #   the round's reports, read from the run record
    pairs = pass_.next()                      #   suspects on their own leaf, then uplinks; []
    rounds = plan_rounds(hcas, views, ...)    # the fixed schedule older kiln ran (up to three
                                              # rounds of everyone): records judged the same
    table(pairs, seconds)                     # one round's table for workloads/ibbw.py

Before the jobs kiln reads every node that declares HCAs over SSH, the same sysfs dump the
infiniband role reads: it resolves each declared rail (a name, GUID or PCI address) to the HCA
name ib_write_bw needs and says which ports are up; read again after the jobs, the two dumps
give the error counters that rose during burn-in. The campaign's rounds are the Locator's
(kiln.judging.locate, at most three, each a matching): every node meets one peer; a node of a
slow rail then meets a peer of its own leaf that has every rail it was slow on (a fault that
follows it there is its own: slow with two peers; one that does not was the other end's or the
path's); a slow rail across leaves whose ends are both cleared is tried from each leaf against a
third leaf (the leaf slow to two is its uplink's). A rail is slow below its floor (measured /
floor < 1, kiln.fabric.bandwidth), as judging reads it. Each pair runs its rails one at a time,
the same rail at both ends (workloads/ibbw.py), one Slurm job per round.

Run record (kiln.records.burnin): ib/sysfs-before/<node>.txt, ib/sysfs-after/<node>.txt (the
dumps), ib/<pair>-rail<k>.txt (the client's ib_write_bw report); the manifest's "ib" entry lists
the nodes and pairs, so a report that is missing is a failure, never a smaller run. Judging:
kiln.judging.rules_ib.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kiln.fabric.links import HcaView, check_rails
from kiln.inventory import Cluster
from kiln.judging.ib import PORT, IbPair, IbRail
from kiln.judging.locate import Fabric, Findings, Locator
from kiln.judging.pairs import default_rounds, pair_schedule
from kiln.judging.rules_ib import leaf_group, rail_verdict
from kiln.records.burnin import RunLayout, read_ib_report

MAX_ROUNDS = 3  # the fixed schedule's: two to three peers per node
DEFAULT_RATE_GBPS = 400.0  # when neither the inventory nor the port tells the rate
MESSAGE_BYTES = 8388608  # the largest size of `ib_write_bw -a`: where a rail reaches line rate


def pair_name(round_: int, client: str, server: str) -> str:
    return f"ib-r{round_}-{client}--{server}"


def usable_rails(
    declared: Sequence[str], views: list[HcaView], port: int = PORT
) -> dict[int, tuple[str, float | None]]:
    """Rail -> (HCA name, port rate) for the declared rails whose HCA is there and whose port is
    Active/LinkUp InfiniBand; the others cannot carry a test (their ib_hca verdict says why)."""
    rates = {(v.name, p.number): p.rate_gbps for v in views for p in v.ports}
    return {
        rail.rail: (rail.hca, rates.get((rail.hca, port)))
        for rail in check_rails(list(declared), views, None, port)
        if rail.hca is not None and rail.ok
    }


def plan_rounds(
    declared: Mapping[str, Sequence[str]],
    views: Mapping[str, list[HcaView]],
    *,
    link_rate_gbps: float | None,
    port: int = PORT,
    rounds: int | None = None,
) -> list[list[IbPair]]:
    """Rounds of disjoint node pairs, each pair with the rails both ends can test.

    `declared`: node -> its kiln_ib_hcas; `views`: node -> its HCAs as read (nodes not read are
    left out). The line rate is the inventory's, else the slower end's port rate."""
    rails_of = {n: usable_rails(declared[n], views[n], port) for n in declared if n in views}
    nodes = [n for n in declared if rails_of.get(n)]
    count = min(MAX_ROUNDS, default_rounds(len(nodes))) if rounds is None else rounds
    planned = []
    for k, matches in enumerate(pair_schedule(nodes, count)):
        pairs = [p for a, b in matches if (p := _pair(k, a, b, rails_of, link_rate_gbps))]
        if pairs:
            planned.append(pairs)
    return planned


RailsOf = Mapping[str, Mapping[int, tuple[str, float | None]]]


def _pair(k: int, a: str, b: str, rails_of: RailsOf, link_rate_gbps: float | None) -> IbPair | None:
    """Round k's pair of a and b on the rails both can test (None: no rail in common)."""
    rails = []
    for rail in sorted(set(rails_of[a]) & set(rails_of[b])):
        (hca_a, rate_a), (hca_b, rate_b) = rails_of[a][rail], rails_of[b][rail]
        seen = [r for r in (rate_a, rate_b) if r]
        rate = link_rate_gbps or (min(seen) if seen else DEFAULT_RATE_GBPS)
        rails.append(IbRail(rail, hca_a, hca_b, float(rate)))
    return IbPair(pair_name(k, a, b), a, b, tuple(rails)) if rails else None


class IbPass:
    """The InfiniBand rounds the Locator picks (see above), one Slurm phase each."""

    def __init__(
        self,
        cluster: Cluster,
        declared: Mapping[str, Sequence[str]],
        views: Mapping[str, list[HcaView]],
        *,
        floor_pct: float | None,
        port: int = PORT,
    ) -> None:
        rails_of = {n: usable_rails(declared[n], views[n], port) for n in declared if n in views}
        self.rails_of = {n: rails for n, rails in rails_of.items() if rails}
        self.link_rate, self.floor_pct = cluster.ib.link_rate_gbps, floor_pct
        groups = {n: leaf_group(cluster, n) for n in self.rails_of}
        # measured / floor per rail: pairs at different line rates share one threshold, 1.0
        self.locator = Locator(Fabric.of_rails(groups, self.rails_of), 1.0)

    def first(self) -> list[IbPair]:
        return self._pairs(self.locator.first_round() if len(self.rails_of) >= 2 else [])

    def record(self, layout: RunLayout, pairs: Sequence[IbPair]) -> None:
        """The round's reports as the Locator reads them; a missing or unreadable one is 0."""
        measured: dict[tuple[str, str], dict[int, float]] = {}
        for pair in pairs:
            for rail in pair.rails:
                measured.setdefault((pair.client, pair.server), {})[rail.rail] = self._ratio(
                    layout, pair, rail
                )
        self.locator.record(measured)

    def next(self) -> list[IbPair]:
        return self._pairs(self.locator.next_round())

    def findings(self) -> Findings:
        return self.locator.findings()

    def _pairs(self, matches: Sequence[tuple[str, str]]) -> list[IbPair]:
        k = self.locator.rounds
        return [p for a, b in matches if (p := _pair(k, a, b, self.rails_of, self.link_rate))]

    def _ratio(self, layout: RunLayout, pair: IbPair, rail: IbRail) -> float:
        got = read_ib_report(layout, pair.name, rail.rail)  # as judging will read it
        verdict = rail_verdict(pair, rail, got, self.floor_pct)
        return verdict.measured_gbps / verdict.floor_gbps


def table(pairs: Sequence[IbPair], seconds: int, port: int = PORT) -> dict:
    """The round's table for workloads/ibbw.py."""
    return {
        "port": port,
        "seconds": seconds,
        "size": MESSAGE_BYTES,
        "pairs": [
            {
                "name": p.name,
                "client": p.client,
                "server": p.server,
                "rails": [[r.rail, r.client_hca, r.server_hca] for r in p.rails],
            }
            for p in pairs
        ],
    }
