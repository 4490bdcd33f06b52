"""infiniband-diags `perfquery`: the PMA port counters of an HCA or switch port.

    # Port extended counters: Lid 2052 port 1 (CapMask: 0x5300 CapMask2: 0x0000002)
    PortSelect:......................1
    CounterSelect:...................0x0000
    PortXmitData:....................178791657177235
    LinkDownedCounter:...............1
    PortXmitDiscards:................20046

Every "# <kind> counters: Lid L port P" header starts a block (`-l`, or several queries in one
log, print several); `-x` prints the extended set (64-bit data counters), `-E` the
PortRcvErrorDetails set. Lines are `Name:` padded with dots to a column, then the value (hex for
the select masks). PortXmitData and PortRcvData count 4-octet words, as the IBA defines them.

Lines that are no part of perfquery's output (libibmad's `ibwarn: ...`, `perfquery: iberror:
...` on stderr folded in, a shell prompt) are skipped and, when the caller passes a list, named
there; a header or counter line that does not read is damaged output and an error.

The error counters map to the names sysfs gives the same PMA counters
(/sys/class/infiniband/<hca>/ports/<p>/counters/<name>), which kiln.fabric.links watches, so a
switch port read with perfquery (no sysfs of its own) is judged like a node's HCA port.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiln.parsers import ParseError
from kiln.parsers._common import SkippedLine, nothing_usable, skip

TOOL = "perfquery"

_HEADER = re.compile(
    r"^#\s*(?P<kind>.*?counters):\s*Lid\s+(?P<lid>\d+)\s+"
    r"(?:port\s+(?P<port>\d+)|(?P<all>all ports))"
    r"(?:\s*\((?P<caps>[^)]*)\))?\s*$"
)
_COUNTER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9]*):\.*(?P<value>(?:0x[0-9a-fA-F]+|\d+))\s*$")
_COUNTER_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9]*:")  # the shape of a counter line
_CAP_MASK = re.compile(r"\bCapMask:\s*(0x[0-9a-fA-F]+)")
_SELECTS = ("PortSelect", "CounterSelect", "CounterSelect2")

# perfquery's names -> the sysfs names of the same counters.
SYSFS_NAMES = {
    "SymbolErrorCounter": "symbol_error",
    "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed",
    "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors",
    "PortXmitDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "VL15Dropped": "VL15_dropped",
    "PortXmitData": "port_xmit_data",
    "PortRcvData": "port_rcv_data",
    "PortXmitPkts": "port_xmit_packets",
    "PortRcvPkts": "port_rcv_packets",
    "PortUnicastXmitPkts": "unicast_xmit_packets",
    "PortUnicastRcvPkts": "unicast_rcv_packets",
    "PortMulticastXmitPkts": "multicast_xmit_packets",
    "PortMulticastRcvPkts": "multicast_rcv_packets",
    "PortXmitWait": "port_xmit_wait",
}


@dataclass(frozen=True, slots=True)
class PortCounters:
    kind: str  # "Port counters", "Port extended counters", "PortRcvErrorDetails counters", ...
    lid: int
    port: int | None  # None: "all ports" (the counters summed over the node's ports)
    cap_mask: int | None
    counters: dict[str, int]  # as perfquery names them, the select masks left out

    @property
    def extended(self) -> bool:
        return self.kind == "Port extended counters"

    def sysfs(self) -> dict[str, int]:
        """The counters under their sysfs names (those sysfs has)."""
        return {SYSFS_NAMES[k]: v for k, v in self.counters.items() if k in SYSFS_NAMES}

    def data_bytes(self) -> tuple[int, int] | None:
        """(transmitted, received) octets, when the data counters are there."""
        xmit, rcv = self.counters.get("PortXmitData"), self.counters.get("PortRcvData")
        return None if xmit is None or rcv is None else (4 * xmit, 4 * rcv)


def parse_perfquery(text: str, skipped: list[SkippedLine] | None = None) -> list[PortCounters]:
    """Every counter block of a perfquery output, in order; lines that are no part of it are
    left out and appended to `skipped` when it is given."""
    skipped = [] if skipped is None else skipped
    blocks: list[PortCounters] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            match = _HEADER.match(stripped)
            if match is None:
                raise ParseError(TOOL, "unknown header", line_no=line_no, line=line)
            caps = _CAP_MASK.search(match.group("caps") or "")
            blocks.append(
                PortCounters(
                    kind=match.group("kind").strip(),
                    lid=int(match.group("lid")),
                    port=None if match.group("all") else int(match.group("port")),
                    cap_mask=int(caps.group(1), 16) if caps else None,
                    counters={},
                )
            )
            continue
        match = _COUNTER.match(stripped)
        if match is None:
            damaged = "not a `Name:....value` counter line"
            skip(
                TOOL,
                skipped,
                line_no,
                line,
                damaged=damaged if _COUNTER_LIKE.match(stripped) else None,
            )
            continue
        if not blocks:
            raise ParseError(TOOL, "counter before any '# ... counters' header", line_no=line_no)
        name, value = match.group("name"), int(match.group("value"), 0)
        if name == "PortSelect" and blocks[-1].port not in (None, value):
            raise ParseError(TOOL, "PortSelect differs from the header's port", line_no=line_no)
        if name not in _SELECTS:
            blocks[-1].counters[name] = value
    if not blocks:
        raise nothing_usable(TOOL, "'# ... counters: Lid L port P' block", skipped)
    return blocks
