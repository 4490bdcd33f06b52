"""Ansible's INI inventory format, read as Ansible reads it, every line kept as an origin."""

from __future__ import annotations

import ast
import re
import shlex
import warnings
from collections.abc import Callable
from pathlib import Path

from kiln.inventory.findings import FindingCollector, Origin
from kiln.inventory.raw import RawGroup, RawInventory, declare_hosts, set_var, update_priority
from kiln.inventory.yamlfile import LocatedDict

# Ansible's INI patterns: `[group]`, `[group:vars]`, with trailing blanks and a `#` comment.
INI_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
INI_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")


def parse_ini_value(text: str) -> object:
    """Ansible's INI typing: Python literals where they parse, strings otherwise."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    if value is ... or isinstance(value, complex | bytes):
        return text
    if isinstance(value, tuple):
        return list(value)
    return value


def read_ini_inventory(
    path: Path,
    text: str,
    raw: RawInventory,
    collector: FindingCollector,
    sealed: Callable[[str, object], object] | None = None,
):
    """Read an INI inventory into `raw`. `sealed(key, value)`: what a value of a whole encrypted
    file becomes (kiln.inventory.secrets.from_encrypted_file), so the records redact it."""
    value_of = sealed or (lambda _key, value: value)
    group_name, state = "ungrouped", "hosts"
    # As Ansible: a group named by [g:children] or [g:vars] must be defined by its own section
    # (here or in an earlier source), or Ansible refuses the whole file.
    defined = {name for name, group in raw.groups.items() if group.origin is not None}
    defined |= {"all", "ungrouped"}
    pending: dict[str, tuple[str, Origin]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        origin = Origin(path, number)
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = INI_SECTION.match(line)
            if section is None:
                collector.error(
                    f"invalid section header {line!r}",
                    origin=origin,
                    hint="write [group], [group:vars] or [group:children]",
                )
                state = "skip"  # its lines belong to no known group
                continue
            group_name, state = section.group(1), section.group(2) or "hosts"
            if state not in ("hosts", "vars", "children"):
                collector.error(
                    f"section [{group_name}:{state}] has unknown type '{state}'",
                    origin=origin,
                    hint="use :vars or :children",
                )
                state = "skip"
                continue
            if state == "vars" and group_name not in defined:
                pending.setdefault(group_name, (f"[{group_name}:vars]", origin))
            elif state != "vars":
                defined.add(group_name)
            if group_name != "all":
                raw.add_child("all", group_name, origin)
            else:
                raw.group("all", origin)
            continue
        if state == "skip":
            continue
        group = raw.group(group_name, origin)
        if state == "vars":
            key, sep, value = line.partition("=")
            if not sep:
                collector.error(f"expected key=value, got {line!r}", origin=origin)
                continue
            set_var(
                group.file_vars, key.strip(), value_of(key.strip(), parse_ini_value(value.strip())),
                origin,
            )  # fmt: skip
            update_priority(group, collector)
        elif state == "children":
            child = INI_GROUP_NAME.match(line)
            if child is None:
                collector.error(f"expected a group name, got {line!r}", origin=origin)
                continue
            raw.add_child(group_name, child.group(1), origin)
            if child.group(1) not in defined:
                pending.setdefault(child.group(1), (f"[{group_name}:children]", origin))
        else:
            _read_host_line(line, group, origin, raw, collector, value_of)
    for name, (section_name, origin) in pending.items():
        if name not in defined:
            collector.error(
                f"{section_name} names group '{name}', which has no [{name}] or "
                f"[{name}:children] section; Ansible refuses this file",
                origin=origin,
                key=name,
                hint=f"add a [{name}] section (it may be empty)",
            )


def _read_host_line(
    line: str,
    group: RawGroup,
    origin: Origin,
    raw: RawInventory,
    collector: FindingCollector,
    value_of: Callable[[str, object], object],
) -> None:
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as error:
        collector.error(f"cannot parse host line: {error}", origin=origin)
        return
    if not tokens:
        return
    pattern, host_vars = tokens[0], LocatedDict()
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if not sep:
            collector.error(f"expected key=value after the host name, got {token!r}", origin=origin)
            continue
        host_vars[key] = value_of(key, parse_ini_value(value))
    declare_hosts(raw, group, pattern, host_vars, None, origin, collector)
