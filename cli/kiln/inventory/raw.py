"""The inventory as its files declare it, before precedence: groups, hosts, values with origins.

The YAML and INI readers (kiln.inventory.sources, kiln.inventory.ini) fill one RawInventory;
declaring a host (ranges, `host:port`, its variables) works the same for both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kiln.inventory.findings import FindingCollector, Origin
from kiln.inventory.hostranges import HostRangeError, expand_host_range
from kiln.inventory.yamlfile import LocatedDict

# `host:port`, `gpu[01:08]:2222`: a trailing port outside any [range].
HOST_PORT = re.compile(r"^(.+):(\d+)$")


@dataclass(slots=True)
class Located:
    value: object
    origin: Origin


@dataclass(slots=True)
class RawGroup:
    name: str
    origin: Origin | None = None
    file_vars: dict[str, Located] = field(default_factory=dict)
    plugin_vars: dict[str, Located] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    priority: int = 1


@dataclass(slots=True)
class RawHost:
    name: str
    declarations: list[Origin] = field(default_factory=list)
    file_vars: dict[str, Located] = field(default_factory=dict)
    plugin_vars: dict[str, Located] = field(default_factory=dict)
    # Every ansible_host given in any declaration, to catch one host with two addresses.
    addresses: list[Located] = field(default_factory=list)


@dataclass(slots=True)
class RawInventory:
    root: Path
    sources: list[Path] = field(default_factory=list)
    groups: dict[str, RawGroup] = field(default_factory=dict)
    hosts: dict[str, RawHost] = field(default_factory=dict)

    def group(self, name: str, origin: Origin | None = None) -> RawGroup:
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = RawGroup(name, origin)
        elif group.origin is None:
            group.origin = origin
        return group

    def host(self, name: str) -> RawHost:
        host = self.hosts.get(name)
        if host is None:
            host = self.hosts[name] = RawHost(name)
        return host

    def add_child(self, parent: str, child: str, origin: Origin) -> None:
        self.group(child, origin)
        children = self.group(parent).children
        if child not in children:
            children.append(child)


def line_of(mapping: object, key: object) -> int:
    if isinstance(mapping, LocatedDict):
        return mapping.key_lines.get(key, mapping.line)
    return 0


def set_var(target: dict[str, Located], key: object, value: object, origin: Origin) -> None:
    target[str(key)] = Located(value, origin)


def split_port(pattern: str) -> tuple[str, int | None]:
    """Ansible's `host:port` (YAML and INI alike); a colon inside a [range] is no port."""
    match = HOST_PORT.match(pattern)
    if match and ":" not in re.sub(r"\[[^\]]*\]", "", match.group(1)):
        return match.group(1), int(match.group(2))
    return pattern, None


def declare_hosts(
    raw: RawInventory,
    group: RawGroup,
    pattern: str,
    host_vars: dict | None,
    path: Path | None,
    origin: Origin,
    collector: FindingCollector,
) -> None:
    """Declare the hosts a pattern names in `group`. `path` is None for an INI host line,
    whose variables all sit on the line of `origin`."""
    pattern, port = split_port(pattern)
    try:
        names = expand_host_range(pattern)
    except HostRangeError as error:
        collector.error(str(error), origin=origin, key=pattern)
        return
    for host_name in names:
        host = raw.host(host_name)
        host.declarations.append(origin)
        if host_name not in group.hosts:
            group.hosts.append(host_name)
        if port is not None:
            set_var(host.file_vars, "ansible_port", port, origin)
        for key, value in (host_vars or {}).items():
            var_origin = Origin(path, line_of(host_vars, key)) if path else origin
            set_var(host.file_vars, key, value, var_origin)
            if key == "ansible_host":
                host.addresses.append(Located(value, var_origin))


def update_priority(group: RawGroup, collector: FindingCollector) -> None:
    # Ansible's Group.set_variable: the priority is a property of the group, not a variable.
    located = group.file_vars.pop("ansible_group_priority", None)
    if located is None:
        return
    try:
        group.priority = int(located.value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        collector.error(
            "ansible_group_priority must be a whole number",
            origin=located.origin,
            key="ansible_group_priority",
        )
