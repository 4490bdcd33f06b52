"""Declared HCAs against what a node reports: present, Active and LinkUp, at the declared rate.

A rail is declared by HCA name (mlx5_0), node GUID (0x946dae0300cde72c) or PCI address
(0000:1a:00.0) in kiln_ib_hcas; it is never inferred from interface order. The node's side
comes from sysfs, /sys/class/infiniband (what the infiniband role reads, through its filter
plugin: `sysfs_observations`, and what burn-in reads over SSH). Each problem names the rail,
the HCA and why.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from kiln.parsers import norm_guid

_GUID = re.compile(r"^(0x)?[0-9a-fA-F]{16}$")
_PCI = re.compile(r"^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
# sysfs "rate": "400 Gb/sec (4X NDR)"; "state": "4: ACTIVE"; "phys_state": "5: LinkUp"
_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")
_SYSFS_STATE = {"ACTIVE": "Active", "DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed"}

# Error counters worth watching across burn-in (sysfs names; perfquery prints the same
# PMA counters as SymbolErrorCounter, LinkDownedCounter, ...).
ERROR_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
)


@dataclass(frozen=True, slots=True)
class PortView:
    number: int
    state: str | None  # Active, Down, ...
    physical_state: str | None  # LinkUp, Polling, Disabled, ...
    rate_gbps: float | None
    link_layer: str | None
    guid: str | None = None  # port GUID, 16 lower-case hex digits


@dataclass(frozen=True, slots=True)
class HcaView:
    name: str
    node_guid: str | None  # 16 lower-case hex digits
    pci: str | None  # 0000:1a:00.0
    ports: tuple[PortView, ...]
    counters: dict[int, dict[str, int]] = field(default_factory=dict)  # port -> name -> value


def binding_kind(binding: str) -> str:
    """ "guid", "pci" or "name"."""
    if _GUID.match(binding):
        return "guid"
    if _PCI.match(binding):
        return "pci"
    return "name"


def resolve(binding: str, hcas: Iterable[HcaView]) -> HcaView | None:
    """The HCA a declared binding names, or None."""
    kind = binding_kind(binding)
    for hca in hcas:
        if kind == "guid" and hca.node_guid == norm_guid(binding):
            return hca
        if kind == "pci" and hca.pci and hca.pci.lower().endswith(binding.lower()):
            return hca
        if kind == "name" and hca.name == binding:
            return hca
    return None


def _state(text: str | None) -> str | None:
    if not text:
        return None
    word = text.split(":", 1)[-1].strip()
    return _SYSFS_STATE.get(word.upper(), word)


SYSFS_ROOT = "/sys/class/infiniband"


def sysfs_dump_command(root: str = SYSFS_ROOT) -> str:
    """The shell command that reads a node's HCAs for parse_sysfs_dump: each HCA's PCI device,
    node GUID, and its ports' state, rate, link layer, GID and counters. The infiniband role
    (read.yml) and burn-in (over SSH, before and after) both run it; it prints nothing on a node
    without the tree."""
    return (
        f"cd {shlex.quote(root)} 2>/dev/null || exit 0; "
        'for hca in *; do [ -e "$hca/node_guid" ] || continue; '
        'printf \'%s/device:%s\\n\' "$hca" "$(basename "$(readlink -f "$hca/device")")"; done; '
        "grep -H . */node_guid */ports/*/state */ports/*/phys_state */ports/*/rate "
        "*/ports/*/link_layer */ports/*/gids/0 */ports/*/counters/* 2>/dev/null; exit 0"
    )


def parse_sysfs_dump(text: str) -> list[HcaView]:
    """Read `grep -H . */node_guid */ports/*/* */ports/*/counters/*` run in
    /sys/class/infiniband, plus lines "<hca>/device:<PCI address>"."""
    raw: dict[str, dict] = {}
    for line in text.splitlines():
        path, sep, value = line.partition(":")
        if not sep:
            continue
        parts = PurePosixPath(path).parts
        hca = raw.setdefault(parts[0], {"ports": {}, "counters": {}})
        value = value.strip()
        if parts[1:] == ("node_guid",):
            hca["guid"] = norm_guid(value.replace(":", ""))
        elif parts[1:] == ("device",):
            hca["pci"] = PurePosixPath(value).name or None
        elif len(parts) == 4 and parts[1] == "ports" and parts[2].isdigit():
            hca["ports"].setdefault(int(parts[2]), {})[parts[3]] = value
        elif len(parts) == 5 and parts[1:4:2] == ("ports", "gids") and parts[4] == "0":
            hca["ports"].setdefault(int(parts[2]), {})["guid"] = norm_guid(
                "".join(value.split(":")[4:])
            )
        elif len(parts) == 5 and parts[1:4:2] == ("ports", "counters") and value.isdigit():
            hca["counters"].setdefault(int(parts[2]), {})[parts[4]] = int(value)
    views = []
    for name in sorted(raw):
        hca = raw[name]
        ports = []
        for number, attrs in sorted(hca["ports"].items()):
            rate = _RATE.match(attrs.get("rate", ""))
            ports.append(PortView(
                number, _state(attrs.get("state")), _state(attrs.get("phys_state")),
                float(rate.group(1)) if rate else None, attrs.get("link_layer"), attrs.get("guid"),
            ))  # fmt: skip
        views.append(HcaView(name, hca.get("guid"), hca.get("pci"), tuple(ports), hca["counters"]))
    return views


@dataclass(frozen=True, slots=True)
class Rail:
    rail: int
    binding: str  # as declared
    hca: str | None  # the HCA found, None when absent
    node_guid: str | None
    pci: str | None
    problems: tuple[str, ...]
    port_guid: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {
            "rail": self.rail,
            "binding": self.binding,
            "hca": self.hca,
            "node_guid": self.node_guid,
            "pci": self.pci,
            "port_guid": self.port_guid,
            "problems": list(self.problems),
        }


def check_rails(
    declared: list[str], hcas: list[HcaView], rate_gbps: float | None, port: int = 1
) -> list[Rail]:
    """One Rail per declared HCA, with what is wrong with it (nothing when it is healthy)."""
    rails = []
    present = ", ".join(h.name for h in hcas) or "none"
    for index, binding in enumerate(declared):
        hca = resolve(binding, hcas)
        if hca is None:
            why = f"rail {index}: HCA {binding} ({binding_kind(binding)}) is not present"
            why += f" (HCAs found: {present})"
            rails.append(Rail(index, binding, None, None, None, (why,)))
            continue
        label = f"rail {index}: {hca.name}" + (f" ({binding})" if binding != hca.name else "")
        view = next((p for p in hca.ports if p.number == port), None)
        problems = []
        if view is None:
            problems.append(f"{label} has no port {port}")
        else:
            if view.link_layer and view.link_layer != "InfiniBand":
                problems.append(f"{label} port {port} is {view.link_layer}, not InfiniBand")
            if view.state != "Active" or view.physical_state != "LinkUp":
                problems.append(
                    f"{label} port {port} is {view.state or '?'}/{view.physical_state or '?'}, "
                    "not Active/LinkUp"
                    + (" (no subnet manager?)" if view.physical_state == "LinkUp" else "")
                )
            elif rate_gbps and (view.rate_gbps or 0) < rate_gbps:
                problems.append(
                    f"{label} port {port} runs at {view.rate_gbps:g} Gb/s, "
                    f"declared {rate_gbps:g} Gb/s"
                )
        guid = view.guid if view else None
        rails.append(Rail(index, binding, hca.name, hca.node_guid, hca.pci, tuple(problems), guid))
    return rails


def port_error_counters(
    views: Iterable[HcaView], hcas: Iterable[str], port: int = 1
) -> dict[str, dict[str, int]]:
    """HCA -> error counter -> value, for the named HCAs' `port` (sysfs views)."""
    by_name = {v.name: v for v in views}
    return {
        name: {k: v for k, v in by_name[name].counters.get(port, {}).items() if k in ERROR_COUNTERS}
        for name in hcas
        if name in by_name
    }


def error_counter_deltas(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """HCA -> error counter -> increase, for counters that rose (a reset reads as the new value)."""
    rises: dict[str, dict[str, int]] = {}
    for hca, counters in after.items():
        for name, value in counters.items():
            if name not in ERROR_COUNTERS:
                continue
            old = before.get(hca, {}).get(name, 0)
            delta = value - old if value >= old else value
            if delta > 0:
                rises.setdefault(hca, {})[name] = delta
    return rises
