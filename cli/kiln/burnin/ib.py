"""InfiniBand in a burn-in campaign: which node pairs run ib_write_bw, on which rails.

    views = parse_sysfs_dump(text)            # each HCA node's sysfs dump (kiln.fabric.links)
    rounds = plan_rounds(hcas, views, ...)    # rounds of IbPairs: who meets whom, on which rails
    table(pairs, seconds)                     # one round's table for workloads/ibbw.py

Before the jobs kiln reads every node that declares HCAs over SSH, the same sysfs dump the
infiniband role reads: it resolves each declared rail (a name, GUID or PCI address) to the HCA
name ib_write_bw needs and says which ports are up; read again after the jobs, the two dumps
give the error counters that rose during burn-in. The pairs come from the pairwise pass's
schedule (kiln.judging.pairs), at most three rounds, so every node meets two or three peers and
a bad HCA (slow with every peer) is told from a bad link (slow with one). Each pair runs its
rails one at a time, the same rail at both ends (workloads/ibbw.py), one Slurm job per round.

Run record (kiln.records.burnin): ib/sysfs-before/<node>.txt, ib/sysfs-after/<node>.txt (the
dumps), ib/<pair>-rail<k>.txt (the client's ib_write_bw report); the manifest's "ib" entry lists
the nodes and pairs, so a report that is missing is a failure, never a smaller run. Judging:
kiln.judging.rules_ib.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kiln.fabric.links import HcaView, check_rails
from kiln.judging.ib import PORT, IbPair, IbRail
from kiln.judging.pairs import default_rounds, pair_schedule

MAX_ROUNDS = 3  # two to three peers per node tell a bad HCA from a bad link
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
        pairs = []
        for a, b in matches:
            rails = []
            for rail in sorted(set(rails_of[a]) & set(rails_of[b])):
                (hca_a, rate_a), (hca_b, rate_b) = rails_of[a][rail], rails_of[b][rail]
                seen = [r for r in (rate_a, rate_b) if r]
                rate = link_rate_gbps or (min(seen) if seen else DEFAULT_RATE_GBPS)
                rails.append(IbRail(rail, hca_a, hca_b, float(rate)))
            if rails:
                pairs.append(IbPair(pair_name(k, a, b), a, b, tuple(rails)))
        if pairs:
            planned.append(pairs)
    return planned


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
