"""Slurm topology.conf from the fabric as ibnetdiscover saw it, and where the inventory differs.

A host has one CA per rail, and on a rail-optimised fabric each rail hangs off its own leaf, so
the same host is cabled to several leaves. Slurm's tree plugin wants each node under one leaf:
a host goes under the leaf of its rail-0 HCA (the first entry of its kiln_ib_hcas); a host the
inventory does not describe goes under the leaf of its CA whose description sorts first. A CA
is a host's when the inventory names it by node or port GUID, else by its node description
("host mlx5_0"): an HCA whose description was never set keeps the adapter's default ("MT4123
ConnectX6   Mellanox Technologies"), and only its GUID can place it. Leaves left without hosts
are dropped, and so are the switches above that then have no children. Every upper switch
lists the switches one level below it that it is cabled to: a fat tree gives a leaf several
parents, which Slurm accepts (any two leaves then share an ancestor).

Slurm's tree plugin places a job across switches only under a switch that reaches all of them,
and a switch line holds nodes or switches, never both ("switch %s has both child switches and
nodes"). So where no switch of the fabric reaches every leaf (two leaves cabled to each other
without a spine, or a partial capture), kiln adds one top switch, `kiln-top`, over the
switches nothing else holds. Compute nodes the capture lacks go under a leaf of their own,
`kiln-not-in-fabric`: with the plugin on, a node in no switch is one Slurm cannot schedule.

fabric_topology() is the whole answer `kiln fabric topology` prints: topology.conf, where the
fabric and the inventory disagree, and the links running below the declared rate. The Slurm
stage renders topology.conf from the capture the inventory stores (topology_from_capture),
which validation has already read and parsed onto the Cluster.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from kiln.errors import InvalidInputError
from kiln.fabric.bandwidth import LINE_RATE_GBPS
from kiln.inventory import Cluster
from kiln.parsers import SkippedLine
from kiln.parsers.ibnetdiscover import DeclaredGuids, IbFabric, owner_of, parse_ibnetdiscover
from kiln.parsers.ibnetdiscover import declared_guids as guid_bindings
from kiln.render import MANAGED_HEADER, environment

_TEMPLATE = Path(__file__).with_name("topology.conf.j2")
_SPEEDS = {rate: name for name, rate in LINE_RATE_GBPS.items()}


TOP = "kiln-top"
NOT_IN_FABRIC = "kiln-not-in-fabric"


@dataclass(frozen=True, slots=True)
class Switch:
    name: str
    level: int  # 0: leaf (holds nodes); 1: the switches above the leaves; ...
    guid: str  # "" for a switch kiln adds (kiln-top, kiln-not-in-fabric)
    nodes: tuple[str, ...] = ()  # leaves only
    switches: tuple[str, ...] = ()  # upper levels only
    note: str = ""  # why kiln added it (a comment line in topology.conf)


@dataclass
class FabricTopology:
    switches: list[Switch]  # leaves first, then each level up, names sorted within a level
    unnamed_cas: list[str] = field(default_factory=list)  # GUIDs of CAs with no host name
    hosts: dict[str, str] = field(default_factory=dict)  # host -> its leaf (as placed)
    not_in_fabric: list[str] = field(default_factory=list)  # hosts under kiln-not-in-fabric

    @property
    def levels(self) -> int:
        return 1 + max((s.level for s in self.switches), default=-1)

    def leaves(self) -> list[Switch]:
        return [s for s in self.switches if s.level == 0]


def declared_guids(cluster: Cluster) -> DeclaredGuids:
    """GUID -> (host, the HCA as declared) for every HCA the inventory names by GUID."""
    return guid_bindings((node.name, node.ib_hcas) for node in cluster.nodes)


def _unique_names(fabric: IbFabric, guids: list[str]) -> dict[str, str]:
    """GUID -> a name for topology.conf; a name two switches share gets the GUID appended."""
    names = {guid: fabric.nodes[guid].short_name for guid in guids}
    counts: dict[str, int] = defaultdict(int)
    for name in names.values():
        counts[name] += 1
    return {g: n if counts[n] == 1 else f"{n}-{g}" for g, n in names.items()}


def _reaching_every_leaf(switches: list[Switch]) -> bool:
    """True when one switch reaches every leaf through its descendants (Slurm's test)."""
    by_name = {s.name: s for s in switches}
    reached: dict[str, frozenset[str]] = {}

    def reach(name: str) -> frozenset[str]:
        if name not in reached:
            switch = by_name[name]
            below = (reach(child) for child in switch.switches)
            reached[name] = frozenset({name} if switch.level == 0 else ()).union(*below)
        return reached[name]

    leaves = frozenset(s.name for s in switches if s.level == 0)
    return any(reach(s.name) >= leaves for s in switches)


def _joined(switches: list[Switch], taken: set[str]) -> list[Switch]:
    """`switches`, with kiln-top over the switches nothing else holds when no switch reaches
    every leaf."""
    if len(switches) < 2 or _reaching_every_leaf(switches):
        return switches
    held = {child for s in switches for child in s.switches}
    roots = tuple(sorted(s.name for s in switches if s.name not in held))
    top = Switch(
        _free(TOP, taken), max(s.level for s in switches) + 1, "", switches=roots,
        note="added by kiln, not in the fabric: no switch there reaches every leaf, and Slurm "
        "places a job across leaves only under one that does",
    )  # fmt: skip
    return [*switches, top]


def _free(name: str, taken: set[str]) -> str:
    """`name`, or `name-2`, `name-3`, ... when a switch of the fabric already has it."""
    number, free = 1, name
    while free in taken:
        number += 1
        free = f"{name}-{number}"
    return free


def build_topology(
    fabric: IbFabric,
    rail0: dict[str, str] | None = None,
    only_hosts: set[str] | None = None,
    not_in_fabric: set[str] | None = None,
    guids: DeclaredGuids | None = None,
) -> FabricTopology:
    """The tree Slurm needs. `rail0` maps host -> its rail-0 HCA name (from the inventory);
    `only_hosts`, when given, keeps other hosts out (slurmctld refuses unknown node names);
    `not_in_fabric`: hosts topology.conf must hold all the same (the compute nodes), those
    the fabric does not show going under kiln-not-in-fabric; `guids`: the HCAs the inventory
    names by GUID (declared_guids)."""
    rail0, guids = rail0 or {}, guids or {}
    levels = fabric.switch_levels()
    names = _unique_names(fabric, sorted(levels))
    candidates: dict[str, list[tuple]] = defaultdict(list)  # host -> [(desc, leaf, hca)]
    unnamed: list[str] = []
    for leaf_guid in (g for g, level in levels.items() if level == 0):
        for ca in fabric.hosts_on(leaf_guid):
            host, hca = owner_of(ca, guids)
            if host is None:
                unnamed.append(ca.guid)
            elif only_hosts is None or host in only_hosts:
                candidates[host].append((ca.description or "", leaf_guid, hca))
    placed: dict[str, str] = {}  # host -> leaf GUID
    for host, seen in candidates.items():
        wanted = rail0.get(host)
        chosen = next((leaf for _, leaf, hca in seen if wanted and hca == wanted), None)
        placed[host] = chosen or min(seen)[1]
    children: dict[str, set[str]] = defaultdict(set)
    for host, leaf in placed.items():
        children[leaf].add(host)
    switches: list[Switch] = [
        Switch(names[g], 0, g, nodes=tuple(sorted(hosts))) for g, hosts in children.items()
    ]
    kept = set(children)
    for level in range(1, max(levels.values(), default=0) + 1):
        below: dict[str, set[str]] = defaultdict(set)
        for guid in (g for g, lv in levels.items() if lv == level):
            for peer in fabric.neighbors(guid):
                if peer.guid in kept and levels.get(peer.guid) == level - 1:
                    below[guid].add(names[peer.guid])
        switches += [
            Switch(names[g], level, g, switches=tuple(sorted(s))) for g, s in below.items()
        ]
        kept = set(below)
    missing = sorted((not_in_fabric or set()) - set(placed)) if placed else []
    if missing:
        switches.append(Switch(
            _free(NOT_IN_FABRIC, set(names.values())), 0, "", nodes=tuple(missing),
            note="added by kiln, not in the fabric: compute nodes the capture lacks (Slurm "
            "schedules no node that is in no switch)",
        ))  # fmt: skip
    switches = _joined(switches, set(names.values()))
    switches.sort(key=lambda s: (s.level, s.name))
    hosts = {host: names[leaf] for host, leaf in sorted(placed.items())}
    return FabricTopology(switches, sorted(set(unnamed)), hosts, missing)


def render_topology_conf(topology: FabricTopology, cluster_name: str, source: str) -> str:
    template = environment().from_string(_TEMPLATE.read_text())
    return template.render(
        ansible_managed=MANAGED_HEADER,
        cluster_name=cluster_name,
        source=source,
        levels=topology.levels,
        switches=topology.switches,
    )


@dataclass(frozen=True, slots=True)
class Disagreement:
    kind: str  # missing-from-fabric, not-in-inventory, leaf-differs, leaf-split, leaf-mixed
    subject: str  # a host, or a switch name
    message: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "subject": self.subject, "message": self.message}


def _short(items: set[str] | list[str], limit: int = 4) -> str:
    items = sorted(items)
    more = f", ... ({len(items)} in all)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def compare_with_inventory(
    topology: FabricTopology, cluster: Cluster, seen: set[str]
) -> list[Disagreement]:
    """Where the fabric and the inventory disagree. `seen`: every host name in the fabric."""
    found: list[Disagreement] = []
    declared = {n.name: n for n in cluster.nodes if n.ib_hcas}
    switch_names = {s.name for s in topology.switches}
    for name in sorted(set(declared) - seen):
        found.append(Disagreement(
            "missing-from-fabric", name,
            f"{name} declares HCAs {', '.join(declared[name].ib_hcas)} but no CA in the fabric "
            "carries its name or those GUIDs (cable, port down, or its node description is not "
            "set: declare the HCAs by GUID)",
        ))  # fmt: skip
    known = {n.name for n in cluster.nodes}
    for name in sorted(seen - known):
        found.append(Disagreement(
            "not-in-inventory", name, f"{name} is in the fabric but not in the inventory",
        ))  # fmt: skip
    by_inventory_leaf: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    by_fabric_leaf: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for host, leaf in topology.hosts.items():
        node = declared.get(host) or (cluster.node(host) if host in known else None)
        if node is None:
            continue
        if node.leaf_switch in switch_names and node.leaf_switch != leaf:
            found.append(Disagreement(
                "leaf-differs", host,
                f"{host}: the inventory says leaf {node.leaf_switch} (rack {node.rack}), "
                f"the fabric has it on {leaf}",
            ))  # fmt: skip
        by_inventory_leaf[node.leaf_switch][leaf].append(host)
        by_fabric_leaf[leaf][f"{node.leaf_switch} (rack {node.rack})"].append(host)
    for inv_leaf, split in sorted(by_inventory_leaf.items()):
        if len(split) > 1:
            parts = "; ".join(f"{leaf}: {_short(hosts)}" for leaf, hosts in sorted(split.items()))
            found.append(Disagreement(
                "leaf-split", inv_leaf,
                f"the inventory puts these under one leaf {inv_leaf}; the fabric splits them: "
                + parts,
            ))  # fmt: skip
    for fab_leaf, mixed in sorted(by_fabric_leaf.items()):
        if len(mixed) > 1:
            parts = "; ".join(f"{inv}: {_short(hosts)}" for inv, hosts in sorted(mixed.items()))
            found.append(Disagreement(
                "leaf-mixed", fab_leaf,
                f"fabric leaf {fab_leaf} holds hosts the inventory puts under different "
                f"leaves: {parts}",
            ))  # fmt: skip
    return found


@dataclass
class TopologyResult:
    source: str
    conf: str
    topology: FabricTopology
    disagreements: list[Disagreement]
    degraded_links: list[str] = field(default_factory=list)
    unnamed_cas: list[str] = field(default_factory=list)
    skipped: list[SkippedLine] = field(default_factory=list)  # diagnostics, stray lines

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "levels": self.topology.levels,
            "switches": [
                {"name": s.name, "level": s.level, "guid": s.guid,
                 "nodes": list(s.nodes), "switches": list(s.switches),
                 "added_by_kiln": not s.guid}
                for s in self.topology.switches
            ],
            "not_in_fabric": self.topology.not_in_fabric,
            "skipped_lines": [
                {"line": s.line_no, "text": s.line, "reason": s.reason} for s in self.skipped
            ],
            "disagreements": [d.to_dict() for d in self.disagreements],
            "degraded_links": self.degraded_links,
            "unnamed_cas": self.unnamed_cas,
            "topology_conf": self.conf,
        }  # fmt: skip


def fabric_topology(cluster: Cluster, fabric: IbFabric, source: str) -> TopologyResult:
    rail0 = {n.name: n.ib_hcas[0] for n in cluster.nodes if n.ib_hcas}
    # Slurm nodes only: slurmctld knows no controller or storage host in topology.conf.
    compute = {n.name for n in cluster.compute}
    guids = declared_guids(cluster)
    seen = {host for ca in fabric.cas() if (host := owner_of(ca, guids)[0])}
    topology = build_topology(
        fabric, rail0=rail0, only_hosts=compute, not_in_fabric=compute, guids=guids
    )
    full = build_topology(fabric, rail0=rail0, guids=guids)  # every host, for the comparison
    disagreements = compare_with_inventory(full, cluster, seen)
    rate = cluster.ib.link_rate_gbps
    degraded = []
    if rate in _SPEEDS:
        for link in fabric.degraded_links("4x", _SPEEDS[rate]):
            a, b = fabric.nodes[link.a_guid], fabric.nodes[link.b_guid]
            degraded.append(
                f"{a.description or a.guid} port {link.a_port} <-> "
                f"{b.description or b.guid} port {link.b_port}: "
                f"{link.width or '?'}{link.speed or '?'}, expected 4x{_SPEEDS[rate]}"
            )
    conf = render_topology_conf(topology, cluster.name, source)
    return TopologyResult(
        source, conf, topology, disagreements, degraded, topology.unnamed_cas,
        skipped=list(fabric.skipped),
    )  # fmt: skip


def topology_from_text(cluster: Cluster, text: str, source: str) -> TopologyResult:
    """From ibnetdiscover output (`kiln fabric topology`: a file, stdin or a node's answer)."""
    return fabric_topology(cluster, parse_ibnetdiscover(text), source)


def topology_from_capture(cluster: Cluster) -> TopologyResult:
    """topology.conf for the Slurm stage when `kiln_slurm.topology` is fabric: from the capture
    validation parsed onto the Cluster, never read again."""
    return fabric_topology(cluster, cluster.fabric, cluster.slurm.ibnetdiscover_file or "")


def read_source(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise InvalidInputError(f"cannot read {path}: {error.strerror}") from error
