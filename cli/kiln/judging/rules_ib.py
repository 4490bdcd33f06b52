"""InfiniBand rules: the HCAs as burn-in found them, ib_write_bw per rail, the error counters.

  ib_hca        a declared HCA missing, its port not Active/LinkUp or below the declared rate
                (read before the jobs): critical, drain
  ib_bandwidth  per node: slow on a rail with most of its peers (kiln.judging.pairs.localise on
                measured / floor, so pairs at different line rates share one threshold, 1.0):
                the node's HCA or cable; drained, naming the rail and HCA
  ib_link       a slow pair whose ends are fine with their other peers: the path between them
                (or, with nobody else to compare, either end): investigate
  ib_counters   an error counter of a declared port rose between before and after: drain
  ib_uplink     a leaf slow on a rail to two other leaves and fine within (kiln.judging.locate
                over the run's rounds): its uplink (spine ports, cables); investigate. The
                pairs it explains are left out of ib_bandwidth and ib_link: nobody is drained
                for an uplink
Each rail is judged on its own: most pairs slow on one rail is that rail's fabric, no drain.
"""

from __future__ import annotations

import re

from kiln.fabric.bandwidth import RailMeasurement, RailVerdict, floor_gbps, judge_rail
from kiln.fabric.links import check_rails, error_counter_deltas, parse_sysfs_dump
from kiln.fabric.links import port_error_counters as _counters
from kiln.inventory.model import Cluster
from kiln.judging._rules import DRAIN, LOOK, C, W
from kiln.judging.ib import IbPair, IbRail, IbRun
from kiln.judging.locate import Fabric, Locator
from kiln.judging.model import NO_IB, IbSection
from kiln.judging.pairs import localise, median
from kiln.judging.verdicts import Verdict, num
from kiln.judging.verdicts import node_verdict as _node
from kiln.parsers.ib_write_bw import IbWriteBwResult


def judge_ib(report, cluster: Cluster, ib: IbRun | None, floor_pct: float | None) -> None:
    """Append the InfiniBand verdicts and set `report.ib`."""
    if ib is None:
        declared = [n for n in report.node_profiles if _hcas(cluster, n)]
        note = "InfiniBand declared but not measured in this run" if declared else NO_IB
        report.ib = IbSection(note=note)
        return
    section = IbSection(nodes=list(ib.nodes), port=ib.port)
    for name in ib.nodes:
        if _hcas(cluster, name):
            _judge_node(report, section, cluster, name, ib)
    _judge_bandwidth(report, section, cluster, ib, floor_pct)
    if not ib.pairs:
        section.note = (
            "one node declares HCAs: no peer for ib_write_bw"
            if len(ib.nodes) == 1
            else "no two nodes had a usable rail in common: ib_write_bw not run"
        )
    report.ib = section


def rail_verdict(
    pair: IbPair, rail: IbRail, got: IbWriteBwResult | str, floor_pct: float | None
) -> RailVerdict:
    """One rail of one pair against its floor; a report that is missing or unreadable (`got`
    says why) measures 0: a failure, never a pass."""
    if isinstance(got, str):
        floor = floor_gbps(rail.link_rate_gbps, floor_pct)
        where = f"rail {rail.rail} ({rail.client_hca}) {pair.client} -> {pair.server}"
        return RailVerdict(
            rail.rail, pair.client, pair.server, rail.client_hca, 0.0, floor,
            rail.link_rate_gbps, False, f"{where}: {got}", rail.server_hca,
        )  # fmt: skip
    measurement = RailMeasurement(
        rail.rail, pair.client, pair.server, rail.client_hca, got, rail.server_hca
    )
    return judge_rail(measurement, rail.link_rate_gbps, floor_pct)


def leaf_group(cluster: Cluster, name: str) -> str:
    """The node's leaf group (kiln_leaf_switch): what the Locator's rounds pair within."""
    try:
        return cluster.node(name).leaf_switch or "fabric"
    except KeyError:
        return "fabric"


def _hcas(cluster: Cluster, name: str) -> tuple[str, ...]:
    try:
        return cluster.node(name).ib_hcas
    except KeyError:
        return ()


def _judge_node(report, section: IbSection, cluster: Cluster, name: str, ib: IbRun) -> None:
    add = report.verdicts.append
    if name not in ib.before:
        add(_node(name, "ib_hca", False, C, LOOK, "ib HCAs not read before burn-in (SSH)"))
        return
    views = parse_sysfs_dump(ib.before[name])
    rails = check_rails(list(_hcas(cluster, name)), views, cluster.ib.link_rate_gbps, ib.port)
    problems = [p for r in rails for p in r.problems]
    add(_node(name, "ib_hca", not problems, C, DRAIN, "ib " + "; ".join(problems)))
    if name not in ib.after:
        add(_node(name, "ib_counters", False, W, LOOK, "ib error counters not read after burn-in"))
        return
    rail_of = {r.hca: r.rail for r in rails if r.hca}
    rises = error_counter_deltas(
        _counters(views, rail_of, ib.port),
        _counters(parse_sysfs_dump(ib.after[name]), rail_of, ib.port),
    )
    parts = [
        f"ib rail{rail_of[hca]} {hca} port {ib.port} errors rose: "
        + ", ".join(f"{counter} +{delta}" for counter, delta in sorted(rose.items()))
        for hca, rose in sorted(rises.items(), key=lambda item: rail_of[item[0]])
    ]
    if not rises:
        add(_node(name, "ib_counters", True))
        return
    section.counter_rises[name] = rises
    total = sum(sum(rose.values()) for rose in rises.values())
    add(_node(name, "ib_counters", False, W, DRAIN, "; ".join(parts), total, 0, "errors"))


def _judge_bandwidth(
    report, section: IbSection, cluster: Cluster, ib: IbRun, floor_pct: float | None
) -> None:
    """Judge every measurement, then localise each rail on its own."""
    by_rail: dict[int, dict[tuple[str, str], RailVerdict]] = {}
    # The HCAs kiln told ib_write_bw to use (-d): they name the culprits, not the report.
    planned: dict[tuple[str, int], str] = {}  # (node, rail) -> HCA
    for pair in ib.pairs:
        for rail in pair.rails:
            got = ib.reports.get((pair.name, rail.rail), "no report")
            verdict = rail_verdict(pair, rail, got, floor_pct)
            section.links.append(verdict)
            by_rail.setdefault(rail.rail, {})[(pair.client, pair.server)] = verdict
            planned[(pair.client, rail.rail)] = rail.client_hca
            planned[(pair.server, rail.rail)] = rail.server_hca
    seen: dict[str, list[RailVerdict]] = {}  # node -> its measurements, all rails
    culprits: dict[str, list[tuple[float, str, RailVerdict]]] = {}  # node -> slow rails
    fabric, uplinks = _uplinks(report, cluster, ib, by_rail)

    def through_uplink(a: str, b: str, rail: int) -> bool:
        leaves = fabric.leaf(a, rail), fabric.leaf(b, rail)
        return leaves[0] != leaves[1] and any(leaf in uplinks for leaf in leaves)

    for rail, verdicts in sorted(by_rail.items()):
        ratios = {
            pair: v.measured_gbps / v.floor_gbps
            for pair, v in verdicts.items()
            if not through_uplink(*pair, rail)
        }  # a pair through a slow uplink says nothing of its two nodes
        loc = localise(ratios, 1.0)
        mine: dict[str, list[RailVerdict]] = {}  # node -> its measurements on this rail
        for (a, b), v in ((pair, verdicts[pair]) for pair in ratios):
            for node in (a, b):
                seen.setdefault(node, []).append(v)
                mine.setdefault(node, []).append(v)
        if loc.fabric_wide:
            report.verdicts.append(Verdict(
                "fabric", f"ib rail{rail}", "ib_bandwidth", False, None, None, "Gb/s", C, LOOK,
                f"ib rail{rail}: {len(loc.slow_pairs)} of {len(ratios)} node pairs below the "
                "floor: a fabric-wide problem (subnet manager, routing, spines), no node drained",
            ))  # fmt: skip
            continue
        for node, tally in loc.culprit_nodes.items():
            v = min(mine[node], key=lambda x: x.measured_gbps / x.floor_gbps)
            hca = planned[(node, rail)]
            text = f"ib rail{rail} {hca} {_gbps(v)} (slow with {tally.slow}/{tally.total} peers)"
            culprits.setdefault(node, []).append((v.measured_gbps / v.floor_gbps, text, v))
        for a, b, _ in loc.culprit_links:
            v = verdicts.get((a, b)) or verdicts[(b, a)]
            lone = [n for n in (a, b) if loc.tallies[n].total == 1]  # met nobody else
            if len(lone) == 2:
                why = "no other peer to tell a node from the link"
            elif lone:
                other = b if lone[0] == a else a
                why = f"{other} fine with other peers, {lone[0]} met no other"
            else:
                why = "both nodes fine with other peers"
            report.verdicts.append(Verdict(
                "link", f"{v.client}<->{v.server} rail{rail}", "ib_link", False,
                v.measured_gbps, v.floor_gbps, "Gb/s", W, LOOK,
                f"ib rail{rail} {v.client} {planned[(v.client, rail)]} -> {v.server} "
                f"{planned[(v.server, rail)]} {_gbps(v)}; {why}",
            ))  # fmt: skip
    for node in sorted(seen):
        found = sorted(culprits.get(node, []), key=lambda item: item[0])
        if not found:
            # Its typical figure: a slow pair it had is another node's or a link's verdict.
            mid = median([v.measured_gbps for v in seen[node]])
            floor = max(v.floor_gbps for v in seen[node])
            report.verdicts.append(_node(
                node, "ib_bandwidth", True, measured=mid, threshold=floor, unit="Gb/s"
            ))  # fmt: skip
            continue
        _, text, v = found[0]
        if len(found) > 1:
            text += "; also " + ", ".join(f"rail{o.rail}" for _, _, o in found[1:])
        report.verdicts.append(_node(
            node, "ib_bandwidth", False, W, DRAIN, text, v.measured_gbps, v.floor_gbps, "Gb/s"
        ))  # fmt: skip


ROUND = re.compile(r"^ib-r(\d+)-")


def _uplinks(
    report, cluster: Cluster, ib: IbRun, by_rail: dict[int, dict[tuple[str, str], RailVerdict]]
) -> tuple[Fabric, dict[str, str]]:
    """The run's rounds (their pairs' names) through the Locator: the leaf uplinks it names,
    each added as an ib_uplink verdict, and the fabric it judged them on."""
    groups = {n: leaf_group(cluster, n) for n in ib.nodes}
    rails: dict[str, set[int]] = {}
    rounds: dict[int, dict[tuple[str, str], dict[int, float]]] = {}
    for pair in ib.pairs:
        found = ROUND.match(pair.name)
        measured = rounds.setdefault(int(found.group(1)) if found else 0, {})
        for rail in pair.rails:
            rails.setdefault(pair.client, set()).add(rail.rail)
            rails.setdefault(pair.server, set()).add(rail.rail)
            v = by_rail[rail.rail][(pair.client, pair.server)]
            ratios = measured.setdefault((pair.client, pair.server), {})
            ratios[rail.rail] = v.measured_gbps / v.floor_gbps
    fabric = Fabric.of_rails(groups, rails)
    locator = Locator(fabric, 1.0)
    for k in sorted(rounds):
        locator.record(rounds[k])
    uplinks = locator.findings().uplinks  # named from a third round only
    for leaf, why in sorted(uplinks.items()):
        report.verdicts.append(Verdict(
            "fabric", leaf, "ib_uplink", False, None, None, "Gb/s", W, LOOK,
            f"ib {leaf}: {why}: its uplink (spine ports or cables), no node drained",
        ))  # fmt: skip
    return fabric, uplinks


def _gbps(v: RailVerdict) -> str:
    if v.measured_gbps == 0:  # no report (see the link's reason)
        return f"no result (floor {num(v.floor_gbps)})"
    return f"{num(v.measured_gbps)} Gb/s < floor {num(v.floor_gbps)}"
