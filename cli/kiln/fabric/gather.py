"""`kiln fabric topology`'s core: ibnetdiscover output in (a file, or a node over SSH), the
topology.conf text, the disagreements with the inventory and the degraded links out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kiln.errors import InvalidInputError, OperationFailed
from kiln.fabric.bandwidth import LINE_RATE_GBPS
from kiln.fabric.topology import (
    Disagreement,
    FabricTopology,
    build_topology,
    compare_with_inventory,
    render_topology_conf,
)
from kiln.inventory import Cluster, Node
from kiln.parsers.ibnetdiscover import parse_ibnetdiscover

_SPEEDS = {rate: name for name, rate in LINE_RATE_GBPS.items()}


@dataclass
class TopologyResult:
    source: str
    conf: str
    topology: FabricTopology
    disagreements: list[Disagreement]
    degraded_links: list[str] = field(default_factory=list)
    unnamed_cas: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "levels": self.topology.levels,
            "switches": [
                {"name": s.name, "level": s.level, "guid": s.guid,
                 "nodes": list(s.nodes), "switches": list(s.switches)}
                for s in self.topology.switches
            ],
            "disagreements": [d.to_dict() for d in self.disagreements],
            "degraded_links": self.degraded_links,
            "unnamed_cas": self.unnamed_cas,
            "topology_conf": self.conf,
        }  # fmt: skip


def gather_node(cluster: Cluster, name: str | None) -> Node:
    """The node to run ibnetdiscover on: `name`, else the first opensm host, else the first
    node declaring HCAs."""
    if name is not None:
        if name not in {n.name for n in cluster.nodes}:
            raise InvalidInputError(f"--node {name} is not in the inventory")
        return cluster.node(name)
    names = {n.name for n in cluster.nodes}
    for host in cluster.ib.opensm_hosts:
        if host in names:
            return cluster.node(host)
    with_hcas = [n for n in cluster.nodes if n.ib_hcas]
    if not with_hcas:
        raise InvalidInputError(
            "no node in the inventory declares HCAs (kiln_ib_hcas) to run ibnetdiscover on",
            hint="give the fabric with --from FILE (ibnetdiscover output)",
        )
    return with_hcas[0]


def gather_ibnetdiscover(node: Node, timeout: float = 300.0) -> str:
    """Run ibnetdiscover on `node` over SSH (kiln.fleet); sudo -n unless the user is root."""
    from kiln.fleet import run_command  # paramiko only when it is used

    user = node.hostvars.get("ansible_user") or node.hostvars.get("ansible_ssh_user")
    command = "ibnetdiscover" if user in (None, "root") else "sudo -n ibnetdiscover"
    result = run_command([node], command, fanout=1, timeout=timeout).results[0]
    if result.status != "ok":
        why = result.error or result.stderr.strip()[-300:] or f"exit {result.exit_code}"
        raise OperationFailed(
            f"ibnetdiscover on {node.name} failed ({result.status}): {why}",
            hint="or run it there yourself and give the output with --from FILE",
        )
    return result.stdout


def fabric_topology(cluster: Cluster, text: str, source: str) -> TopologyResult:
    fabric = parse_ibnetdiscover(text)
    rail0 = {n.name: n.ib_hcas[0] for n in cluster.nodes if n.ib_hcas}
    # Slurm nodes only: slurmctld knows no controller or storage host in topology.conf.
    compute = {n.name for n in cluster.compute}
    seen = {ca.hostname for ca in fabric.cas() if ca.hostname}
    topology = build_topology(fabric, rail0=rail0, only_hosts=compute)
    full = build_topology(fabric, rail0=rail0)  # every host, for the comparison
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
    return TopologyResult(source, conf, topology, disagreements, degraded, topology.unnamed_cas)


def capture_path(cluster: Cluster) -> Path:
    """The stored ibnetdiscover capture of `kiln_slurm.ibnetdiscover_file` (inventory-relative)."""
    name = Path(cluster.slurm.ibnetdiscover_file or "")
    return name if name.is_absolute() else cluster.inventory_dir / name


def topology_from_capture(cluster: Cluster) -> TopologyResult:
    """topology.conf for the Slurm stage when `kiln_slurm.topology` is fabric (validation has
    already read and parsed the capture)."""
    path = capture_path(cluster)
    return fabric_topology(cluster, read_source(path), cluster.slurm.ibnetdiscover_file or "")


def read_source(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise InvalidInputError(f"cannot read {path}: {error.strerror}") from error
