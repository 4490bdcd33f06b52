"""`ibstat` (infiniband-diags): one block per channel adapter, one sub-block per port.

CA 'mlx5_0'
<TAB>CA type: MT4129
<TAB>Firmware version: 28.39.1002
<TAB>Node GUID: 0x946dae0300cde72c
<TAB>Port 1:
<TAB><TAB>State: Active
<TAB><TAB>Physical state: LinkUp
<TAB><TAB>Rate: 400
...

ibstat indents everything but the "CA '<name>'" lines, so a line at column 0 that is not one is
no part of its output: libibumad's diagnostics on stderr folded in (`ibpanic: [7851] main: stat
of IB device 'mlx5_1' failed: Invalid argument`), a shell prompt. Such lines are skipped and,
when the caller passes a list, named there; an indented line that does not read is damaged
output and an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kiln.parsers import ParseError
from kiln.parsers._common import SkippedLine, integer, norm_guid, nothing_usable, number, skip

TOOL = "ibstat"

_CA = re.compile(r"^CA '(?P<name>[^']+)'\s*$")
_PORT = re.compile(r"^\s+Port (?P<num>\d+):\s*$")
_KEY_VALUE = re.compile(r"^\s+(?P<key>[^:]+?)\s*:\s*(?P<value>.*?)\s*$")


@dataclass(frozen=True, slots=True)
class IbPort:
    number: int
    state: str | None  # Active, Down, Initializing, Armed
    physical_state: str | None  # LinkUp, Polling, Disabled, ...
    rate_gbps: float | None  # 400 (NDR), 200 (HDR), 100 (EDR) ...
    base_lid: int | None
    lmc: int | None
    sm_lid: int | None
    capability_mask: str | None
    port_guid: str | None  # 16 lower-case hex digits
    link_layer: str | None  # InfiniBand or Ethernet
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def is_up(self) -> bool:
        """Active and LinkUp: the port carries traffic."""
        return self.state == "Active" and self.physical_state == "LinkUp"

    @property
    def is_infiniband(self) -> bool:
        return self.link_layer == "InfiniBand"


@dataclass(frozen=True, slots=True)
class IbCa:
    name: str  # mlx5_0
    ca_type: str | None  # MT4129 (ConnectX-7)
    number_of_ports: int | None
    firmware_version: str | None
    hardware_version: str | None
    node_guid: str | None
    system_image_guid: str | None
    ports: tuple[IbPort, ...]
    extra: dict[str, str] = field(default_factory=dict)

    def port(self, number: int) -> IbPort | None:
        return next((p for p in self.ports if p.number == number), None)


_CA_KEYS = {
    "CA type": "ca_type",
    "Number of ports": "number_of_ports",
    "Firmware version": "firmware_version",
    "Hardware version": "hardware_version",
    "Node GUID": "node_guid",
    "System image GUID": "system_image_guid",
}
_PORT_KEYS = {
    "State": "state",
    "Physical state": "physical_state",
    "Rate": "rate_gbps",
    "Base lid": "base_lid",
    "LMC": "lmc",
    "SM lid": "sm_lid",
    "Capability mask": "capability_mask",
    "Port GUID": "port_guid",
    "Link layer": "link_layer",
}


def _build_port(number_: int, raw: dict[str, str]) -> IbPort:
    return IbPort(
        number=number_,
        state=raw.get("State"),
        physical_state=raw.get("Physical state"),
        rate_gbps=number(raw.get("Rate")),
        base_lid=integer(raw.get("Base lid")),
        lmc=integer(raw.get("LMC")),
        sm_lid=integer(raw.get("SM lid")),
        capability_mask=raw.get("Capability mask"),
        port_guid=norm_guid(raw["Port GUID"]) if "Port GUID" in raw else None,
        link_layer=raw.get("Link layer"),
        extra={k: v for k, v in raw.items() if k not in _PORT_KEYS},
    )


def _build_ca(name: str, raw: dict[str, str], ports: list[IbPort]) -> IbCa:
    return IbCa(
        name=name,
        ca_type=raw.get("CA type"),
        number_of_ports=integer(raw.get("Number of ports")),
        firmware_version=raw.get("Firmware version"),
        hardware_version=raw.get("Hardware version"),
        node_guid=norm_guid(raw["Node GUID"]) if "Node GUID" in raw else None,
        system_image_guid=norm_guid(raw["System image GUID"])
        if "System image GUID" in raw
        else None,
        ports=tuple(ports),
        extra={k: v for k, v in raw.items() if k not in _CA_KEYS},
    )


def parse_ibstat(text: str, skipped: list[SkippedLine] | None = None) -> list[IbCa]:
    """Parse `ibstat` (all CAs, or one: `ibstat mlx5_0`) into CAs in the order printed.

    Lines that are no part of ibstat's output are left out and appended to `skipped` when it is
    given; ParseError for damaged output or when no CA is left."""
    skipped = [] if skipped is None else skipped
    cas: list[IbCa] = []
    ca_name: str | None = None
    ca_raw: dict[str, str] = {}
    ports: list[IbPort] = []
    port_num: int | None = None
    port_raw: dict[str, str] = {}

    def close_port() -> None:
        nonlocal port_num, port_raw
        if port_num is not None:
            ports.append(_build_port(port_num, port_raw))
        port_num, port_raw = None, {}

    def close_ca() -> None:
        nonlocal ca_name, ca_raw, ports
        close_port()
        if ca_name is not None:
            cas.append(_build_ca(ca_name, ca_raw, ports))
        ca_name, ca_raw, ports = None, {}, []

    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if match := _CA.match(line):
            close_ca()
            ca_name = match.group("name")
            continue
        if ca_name is None or not line[:1].isspace():
            damaged = "expected \"CA '<name>'\"" if line[:1].isspace() else None
            skip(TOOL, skipped, line_no, line, damaged=damaged)
            continue
        if match := _PORT.match(line):
            close_port()
            port_num = int(match.group("num"))
            continue
        match = _KEY_VALUE.match(line)
        if not match:
            raise ParseError(TOOL, "expected 'Key: value'", line_no=line_no, line=line)
        key, value = match.group("key"), match.group("value")
        # Port attributes are indented two tabs; CA attributes one.
        if port_num is not None and line.startswith(("\t\t", "        ")):
            port_raw[key] = value
        else:
            close_port()
            ca_raw[key] = value
    close_ca()
    if not cas:
        raise nothing_usable(TOOL, "CA", skipped)
    return cas
