"""`ibnetdiscover` (default topology format) into a fabric graph.

    switchguid=0x2c5eab0300b87b40(2c5eab0300b87b40)
    Switch 65 "S-2c5eab0300b87b40"  # "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1" enhanced port 0 lid 73
    [1] "H-e09d7303007a4bd8"[1](e09d7303007a4bd8)  # "a08-p1-dgx-04-c01 mlx5_5" lid 647 4xNDR
    [35] "S-2c5eab0300c26280"[32]  # "MF0;A10-P1-IBSPINE-02:MQM9701/U1" lid 236 4xNDR

    caguid=0xe09d7303007a4bd8
    Ca  1 "H-e09d7303007a4bd8"   # "a08-p1-dgx-04-c01 mlx5_5"
    [1](e09d7303007a4bd8)  "S-2c5eab0300b87b40"[1]  # lid 647 lmc 0 "MF0;A09-..." lid 73 4xNDR

Every node that appears, as a block or only as the far end of a link, becomes an `IbNode`; every
cable becomes one `IbLink` (a link printed from both ends is kept once). The graph answers what
Slurm's topology.conf needs: leaf switches (with hosts attached), the switches above them and
which host hangs off which leaf. SHARP aggregation nodes (a CA inside every Quantum switch) are
kept in the graph but never count as hosts.

What real captures carry besides: stderr folded in (`src/query_smp.c:195; umad (...) bad status
110; Connection timed out`, `ibwarn: ...`) and other text that is not the tool's (a shell
prompt) are skipped, each named by its line in `IbFabric.skipped`; `-g` grouping headers
("Non-Chassis Nodes") are read past. Releases before about 2009 print no link width and speed
(`# "node24 HCA-1" lid 18`): such links have none and are not judged by rate. A line with the
shape of the tool's own output that still does not parse is a damaged capture and an error,
and so is a capture with no node at all.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kiln.parsers import ParseError
from kiln.parsers._common import SkippedLine, norm_guid, nothing_usable, skip

TOOL = "ibnetdiscover"

_KINDS = {"Switch": "switch", "Ca": "ca", "Rt": "router"}
_PREFIX_KINDS = {"S": "switch", "H": "ca", "R": "router"}

_NODE = re.compile(
    r'^(?P<kind>Switch|Ca|Rt)\s+(?P<ports>\d+)\s+"(?P<prefix>[SHR])-(?P<guid>[0-9a-fA-F]+)"'
    r'\s*(?:#\s*"(?P<desc>[^"]*)"(?P<rest>.*))?$'
)
_HEADER = re.compile(r"^(?P<key>vendid|devid|sysimgguid|switchguid|caguid|rtguid)=(?P<value>\S+)")
_PORT = re.compile(
    r"^\[(?P<port>\d+)\](?:\[ext \d+\])?(?:\((?P<portguid>[0-9a-fA-F]+)\))?\s+"
    r'"(?P<prefix>[SHR])-(?P<guid>[0-9a-fA-F]+)"\[(?P<peer_port>\d+)\](?:\[ext \d+\])?'
    r"(?:\((?P<peer_portguid>[0-9a-fA-F]+)\))?\s*(?:#\s*(?P<comment>.*))?$"
)
_PEER = re.compile(
    r'"(?P<desc>[^"]*)"\s+lid\s+(?P<lid>\d+)(?:\s+(?P<width>\d+x)(?P<speed>[A-Za-z0-9]+))?\s*$'
)
_OWN_LID = re.compile(r"\blid\s+(\d+)")
# CAs whose node description was never set print the adapter's default instead of a hostname.
_DEFAULT_CA_DESC = re.compile(r"^(MT\d+\b|Mellanox Technologies|NVIDIA\b)")
# `-g` (grouping) headers between the blocks.
_GROUPING = re.compile(r"^(?:Non-Chassis Nodes|Chassis\s+\d+\b.*)$")
# The start of a line of the tool's own: a port, a node, a header. Such a line that does not
# parse is a damaged capture, not a stray line.
_OURS = re.compile(r"^(?:\[\d|(?:Switch|Ca|Rt)\s|(?:vendid|devid|sysimgguid|\w+guid)=)")


@dataclass(slots=True)
class IbNode:
    guid: str  # node GUID, 16 lower-case hex digits
    kind: str  # "switch", "ca" or "router"
    description: str | None = None
    lid: int | None = None
    port_count: int | None = None
    vendid: str | None = None
    devid: str | None = None
    sysimgguid: str | None = None
    listed: bool = False  # True when the node had its own block (not only seen as a peer)
    # Port GUIDs seen in parentheses ("[1](e09d7303007a4bd8)"): what ibstat shows a host, and so
    # what an inventory may name an HCA by when its description is still the default.
    port_guids: set[str] = field(default_factory=set)

    @property
    def is_aggregation_node(self) -> bool:
        """A SHARP aggregation node: a CA inside a switch, not a host."""
        return self.kind == "ca" and "Aggregation Node" in (self.description or "")

    @property
    def hostname(self) -> str | None:
        """The host of a CA, from its node description ("a08-p1-dgx-04-c01 mlx5_5").

        rdma-ndd (and OFED before it) sets "<host> <hca>": two words. None for aggregation
        nodes and for CAs still showing a default description ("MT4129 ConnectX7 Mellanox
        Technologies", "Pseudo InfiniBand HCA driver").
        """
        if self.kind != "ca" or not self.description or self.is_aggregation_node:
            return None
        words = self.description.split()
        if len(words) != 2 or _DEFAULT_CA_DESC.match(self.description):
            return None
        return words[0]

    @property
    def short_name(self) -> str:
        """A name usable in topology.conf: "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1" -> the middle."""
        desc = self.description or ""
        if self.kind == "switch" and desc:
            name = desc.split(";", 1)[-1].split(":", 1)[0].strip()
            if name and re.fullmatch(r"[\w.-]+", name):
                return name
        return f"{self.kind}-{self.guid}"


@dataclass(frozen=True, slots=True)
class IbLink:
    """One cable. Ends are ordered as first printed."""

    a_guid: str
    a_port: int
    b_guid: str
    b_port: int
    width: str | None  # "4x"; None when the release printed no rate
    speed: str | None  # "NDR", "HDR", "EDR"

    def other(self, guid: str) -> tuple[str, int]:
        return (self.b_guid, self.b_port) if guid == self.a_guid else (self.a_guid, self.a_port)


@dataclass(slots=True)
class IbFabric:
    nodes: dict[str, IbNode] = field(default_factory=dict)
    links: list[IbLink] = field(default_factory=list)
    # node GUID -> its links; kept by add_link so lookups stay linear on large fabrics
    adjacency: dict[str, list[IbLink]] = field(default_factory=dict)
    skipped: list[SkippedLine] = field(default_factory=list)  # diagnostics and stray lines

    def add_link(self, link: IbLink) -> None:
        self.links.append(link)
        self.adjacency.setdefault(link.a_guid, []).append(link)
        if link.b_guid != link.a_guid:
            self.adjacency.setdefault(link.b_guid, []).append(link)

    def switches(self) -> list[IbNode]:
        return [n for n in self.nodes.values() if n.kind == "switch"]

    def cas(self) -> list[IbNode]:
        return [n for n in self.nodes.values() if n.kind == "ca"]

    def links_of(self, guid: str) -> list[IbLink]:
        return list(self.adjacency.get(guid, ()))

    def neighbors(self, guid: str) -> list[IbNode]:
        seen: dict[str, IbNode] = {}
        for link in self.links_of(guid):
            peer, _ = link.other(guid)
            seen.setdefault(peer, self.nodes[peer])
        return list(seen.values())

    def hosts_on(self, switch_guid: str) -> list[IbNode]:
        """CAs cabled to this switch, aggregation nodes excluded."""
        return [
            n for n in self.neighbors(switch_guid) if n.kind == "ca" and not n.is_aggregation_node
        ]

    def leaf_switches(self) -> list[IbNode]:
        """Switches with at least one host CA attached."""
        return [s for s in self.switches() if self.hosts_on(s.guid)]

    def spine_switches(self) -> list[IbNode]:
        """Switches connected only to switches (aggregation nodes aside)."""
        return [
            s
            for s in self.switches()
            if not self.hosts_on(s.guid) and any(n.kind == "switch" for n in self.neighbors(s.guid))
        ]

    def switch_levels(self) -> dict[str, int]:
        """Level of each reachable switch: leaves 0, the switches above them 1, and so on."""
        levels = {s.guid: 0 for s in self.leaf_switches()}
        queue = deque(levels)
        while queue:
            guid = queue.popleft()
            for peer in self.neighbors(guid):
                if peer.kind == "switch" and peer.guid not in levels:
                    levels[peer.guid] = levels[guid] + 1
                    queue.append(peer.guid)
        return levels

    def degraded_links(self, width: str, speed: str) -> list[IbLink]:
        """Links not running at the expected width and speed (e.g. "4x", "NDR"); links whose
        rate the capture does not show are not judged."""
        return [
            lk
            for lk in self.links
            if lk.speed is not None and (lk.width, lk.speed) != (width, speed)
        ]


# An HCA named by GUID in an inventory (kiln_ib_hcas): "0x946dae0300cde72c", as ibstat prints it.
GUID_BINDING = re.compile(r"^(0x)?[0-9a-fA-F]{16}$")

# GUID -> (host, the HCA as the inventory declares it)
DeclaredGuids = dict[str, tuple[str, str]]


def declared_guids(declared: Iterable[tuple[str, Iterable[str]]]) -> DeclaredGuids:
    """GUID -> (host, HCA as declared) for each HCA named by node or port GUID; `declared`
    holds (host, its kiln_ib_hcas). Names (mlx5_0) and PCI addresses are left out."""
    return {
        norm_guid(hca): (host, hca)
        for host, hcas in declared
        for hca in hcas
        if GUID_BINDING.match(hca)
    }


def owner_of(ca: IbNode, guids: Mapping[str, tuple[str, str]]) -> tuple[str | None, str | None]:
    """(host, HCA) of a CA: the inventory's GUID for it first (its node GUID, then a port
    GUID), then its node description ("host mlx5_0"). A CA keeping the adapter's default
    description ("MT4123 ConnectX6   Mellanox Technologies") has only its GUIDs to go by.
    (None, None) when neither names a host."""
    for guid in (ca.guid, *sorted(ca.port_guids)):
        if guid in guids:
            return guids[guid]
    host = ca.hostname
    return (host, (ca.description or "").split()[1]) if host else (None, None)


def _node(fabric: IbFabric, guid: str, kind: str) -> IbNode:
    node = fabric.nodes.get(guid)
    if node is None:
        node = fabric.nodes[guid] = IbNode(guid=guid, kind=kind)
    return node


def parse_ibnetdiscover(text: str) -> IbFabric:
    """Parse `ibnetdiscover` output (also a partial one: peers without a block are kept).

    Diagnostics and stray lines are skipped into `IbFabric.skipped`; ParseError for a damaged
    line of the tool's own or a capture with no node."""
    fabric = IbFabric()
    seen_links: set[frozenset[tuple[str, int]]] = set()
    current: IbNode | None = None
    header: dict[str, str] = {}

    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            current, header = None, {}
            continue
        if line.startswith("#") or _GROUPING.match(line):
            continue
        if match := _HEADER.match(line):
            header[match.group("key")] = match.group("value")
            continue
        if match := _NODE.match(line):
            kind = _KINDS[match.group("kind")]
            current = _node(fabric, norm_guid(match.group("guid")), kind)
            current.listed = True
            current.port_count = int(match.group("ports"))
            if match.group("desc") is not None:
                current.description = match.group("desc")
            if lid := _OWN_LID.search(match.group("rest") or ""):
                current.lid = int(lid.group(1))
            current.vendid = header.get("vendid")
            current.devid = header.get("devid")
            if "sysimgguid" in header:
                current.sysimgguid = norm_guid(header["sysimgguid"])
            continue
        if match := _PORT.match(line):
            if current is None:
                raise ParseError(TOOL, "port line outside a node block", line_no=line_no, line=raw)
            peer_guid = norm_guid(match.group("guid"))
            peer = _node(fabric, peer_guid, _PREFIX_KINDS[match.group("prefix")])
            for node, port_guid in ((current, "portguid"), (peer, "peer_portguid")):
                if match.group(port_guid):
                    node.port_guids.add(norm_guid(match.group(port_guid)))
            width = speed = None
            comment = match.group("comment") or ""
            if peer_match := _PEER.search(comment):
                if peer.description is None:
                    peer.description = peer_match.group("desc")
                if peer.lid is None:
                    peer.lid = int(peer_match.group("lid"))
                width, speed = peer_match.group("width"), peer_match.group("speed")
            port, peer_port = int(match.group("port")), int(match.group("peer_port"))
            key = frozenset({(current.guid, port), (peer_guid, peer_port)})
            if key not in seen_links:
                seen_links.add(key)
                fabric.add_link(IbLink(current.guid, port, peer_guid, peer_port, width, speed))
            continue
        skip(
            TOOL,
            fabric.skipped,
            line_no,
            raw,
            damaged="unrecognised line" if _OURS.match(line) else None,
        )

    if not fabric.nodes:
        raise nothing_usable(TOOL, "switch or CA", fabric.skipped)
    return fabric
