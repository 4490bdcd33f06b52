"""Read the files of an Ansible inventory directory, as Ansible reads them, keeping origins.

Produces a RawInventory: groups (file vars, group_vars/ vars, children, hosts) and hosts
(file vars merged across declarations, host_vars/ vars), every value with its file:line.
Nothing here judges the values; kiln.inventory.checks does that.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from kiln.inventory.findings import FindingCollector, Origin
from kiln.inventory.hostranges import HostRangeError, expand_host_range
from kiln.inventory.yamlfile import LocatedDict, YamlError, load_yaml

YAML_EXTENSIONS = (".yml", ".yaml", ".json")
# Ansible's INVENTORY_IGNORE_EXTS and its ignored names.
IGNORED_EXTENSIONS = (
    ".pyc",
    ".pyo",
    ".swp",
    ".bak",
    "~",
    ".rpm",
    ".md",
    ".txt",
    ".rst",
    ".orig",
    ".cfg",
    ".retry",
)
VARS_DIRS = ("group_vars", "host_vars")
# Ansible's INI patterns: `[group]`, `[group:vars]`, with trailing blanks and a `#` comment.
INI_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
INI_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")
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


def read_inventory(path: Path, collector: FindingCollector) -> RawInventory | None:
    """Read an inventory directory (or a single inventory file beside its *_vars dirs)."""
    path = path.expanduser().absolute()
    if not path.exists():
        collector.error(
            f"inventory {path} does not exist",
            origin=Origin(path),
            hint="pass the directory that holds hosts.yml (or hosts.ini), group_vars/ and "
            "host_vars/",
        )
        return None
    if path.is_dir():
        root = path
        sources = _inventory_sources(root, collector)
    else:
        root, sources = path.parent, [path]
    if not sources:
        collector.error(
            f"inventory {path} holds no inventory file",
            origin=Origin(path),
            hint="add hosts.yml (YAML) or hosts (INI) listing kiln_controllers and kiln_compute",
        )
        return None

    raw = RawInventory(root=root, sources=sources)
    raw.group("all")
    raw.group("ungrouped")
    raw.add_child("all", "ungrouped", Origin(root))
    for source in sources:
        text = _read_text(source, collector)
        if text is None:
            continue
        if source.suffix in YAML_EXTENSIONS or (not source.suffix and _is_yaml_inventory(text)):
            _read_yaml_inventory(source, text, raw, collector)
        else:
            _read_ini_inventory(source, text, raw, collector)
    _read_vars_dirs(raw, collector)
    return raw


def _inventory_sources(root: Path, collector: FindingCollector) -> list[Path]:
    sources = []
    for entry in sorted(root.iterdir()):
        name = entry.name
        if name.startswith(".") or name in VARS_DIRS or entry.is_dir():
            continue
        if name.endswith(IGNORED_EXTENSIONS):
            continue
        if os.access(entry, os.X_OK) and entry.suffix not in YAML_EXTENSIONS:
            collector.error(
                f"{name} is executable: kiln reads static inventories only, not scripts",
                origin=Origin(entry),
                hint="export the dynamic inventory to YAML (ansible-inventory --list -y) "
                "or clear the file's executable bit",
            )
            continue
        sources.append(entry)
    return sources


def _read_text(path: Path, collector: FindingCollector) -> str | None:
    try:
        data = path.read_bytes()
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        collector.error(
            f"not UTF-8 text: {error.reason}",
            origin=Origin(path, line),
            hint="save the file as UTF-8",
        )
    except OSError as error:
        collector.error(f"cannot read: {error.strerror}", origin=Origin(path))
    return None


def _load_yaml_file(path: Path, text: str, collector: FindingCollector) -> object:
    try:
        data = load_yaml(text)
    except YamlError as error:
        collector.error(
            error.message,
            origin=Origin(path, error.line),
            hint="fix the YAML syntax; `yamllint FILE` shows the details",
        )
        return None
    _report_duplicate_keys(data, path, collector)
    return data


def _report_duplicate_keys(data: object, path: Path, collector: FindingCollector) -> None:
    if isinstance(data, LocatedDict):
        for key, line in data.duplicates:
            collector.warning(
                f"key '{key}' appears twice in one mapping; the last one wins",
                origin=Origin(path, line),
                key=key,
                hint="remove one of them",
            )
        for value in data.values():
            _report_duplicate_keys(value, path, collector)
    elif isinstance(data, list):
        for value in data:
            _report_duplicate_keys(value, path, collector)


def _line_of(mapping: object, key: object) -> int:
    if isinstance(mapping, LocatedDict):
        return mapping.key_lines.get(key, mapping.line)
    return 0


# -- YAML inventories --------------------------------------------------------------------


def _read_yaml_inventory(path: Path, text: str, raw: RawInventory, collector: FindingCollector):
    data = _load_yaml_file(path, text, collector)
    if data is None:
        return
    if not isinstance(data, dict):
        collector.error(
            "an inventory file must be a mapping of groups (start with `all:`)",
            origin=Origin(path, 1),
        )
        return
    for group_name, body in data.items():
        origin = Origin(path, _line_of(data, group_name))
        if group_name != "all":
            raw.add_child("all", str(group_name), origin)
        _read_yaml_group(path, str(group_name), body, origin, raw, collector)


def _read_yaml_group(path, name, body, origin, raw, collector) -> None:
    group = raw.group(name, origin)
    if body is None:
        return
    if not isinstance(body, dict):
        collector.error(
            f"group '{name}' must be a mapping with hosts, vars or children",
            origin=origin,
            key=name,
        )
        return
    for section, value in body.items():
        line = Origin(path, _line_of(body, section))
        if value is None:
            continue
        if section not in ("hosts", "vars", "children"):
            collector.error(
                f"group '{name}' has an unexpected key '{section}'",
                origin=line,
                key=str(section),
                hint="a group holds only `hosts:`, `vars:` and `children:`",
            )
        elif not isinstance(value, dict):
            collector.error(
                f"`{section}` of group '{name}' must be a mapping", origin=line, key=str(section)
            )
        elif section == "vars":
            for key, var in value.items():
                _set_var(group.file_vars, key, var, Origin(path, _line_of(value, key)))
            _update_priority(group, collector)
        elif section == "children":
            for child, child_body in value.items():
                child_origin = Origin(path, _line_of(value, child))
                raw.add_child(name, str(child), child_origin)
                _read_yaml_group(path, str(child), child_body, child_origin, raw, collector)
        else:
            for pattern, host_vars in value.items():
                host_origin = Origin(path, _line_of(value, pattern))
                if host_vars is not None and not isinstance(host_vars, dict):
                    collector.error(
                        f"host '{pattern}' must map to its variables (or nothing)",
                        origin=host_origin,
                        key=str(pattern),
                    )
                    host_vars = None
                _declare_hosts(raw, group, str(pattern), host_vars, path, host_origin, collector)


def _split_port(pattern: str) -> tuple[str, int | None]:
    """Ansible's `host:port` (YAML and INI alike); a colon inside a [range] is no port."""
    match = HOST_PORT.match(pattern)
    if match and ":" not in re.sub(r"\[[^\]]*\]", "", match.group(1)):
        return match.group(1), int(match.group(2))
    return pattern, None


def _declare_hosts(raw, group, pattern, host_vars, path, origin, collector) -> None:
    pattern, port = _split_port(pattern)
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
            _set_var(host.file_vars, "ansible_port", port, origin)
        for key, value in (host_vars or {}).items():
            var_origin = Origin(path, _line_of(host_vars, key)) if path else origin
            _set_var(host.file_vars, key, value, var_origin)
            if key == "ansible_host":
                host.addresses.append(Located(value, var_origin))


def _set_var(target: dict[str, Located], key: object, value: object, origin: Origin) -> None:
    target[str(key)] = Located(value, origin)


def _update_priority(group: RawGroup, collector: FindingCollector) -> None:
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


def _is_yaml_inventory(text: str) -> bool:
    """Ansible tries its yaml plugin first on a file without extension, then ini."""
    try:
        return isinstance(load_yaml(text), dict)
    except YamlError:
        return False


# -- INI inventories ---------------------------------------------------------------------


def _parse_ini_value(text: str) -> object:
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


def _read_ini_inventory(path: Path, text: str, raw: RawInventory, collector: FindingCollector):
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
            _set_var(group.file_vars, key.strip(), _parse_ini_value(value.strip()), origin)
            _update_priority(group, collector)
        elif state == "children":
            child = INI_GROUP_NAME.match(line)
            if child is None:
                collector.error(f"expected a group name, got {line!r}", origin=origin)
                continue
            raw.add_child(group_name, child.group(1), origin)
            if child.group(1) not in defined:
                pending.setdefault(child.group(1), (f"[{group_name}:children]", origin))
        else:
            _read_ini_host_line(line, group, origin, raw, collector)
    for name, (section_name, origin) in pending.items():
        if name not in defined:
            collector.error(
                f"{section_name} names group '{name}', which has no [{name}] or "
                f"[{name}:children] section; Ansible refuses this file",
                origin=origin,
                key=name,
                hint=f"add a [{name}] section (it may be empty)",
            )


def _read_ini_host_line(line, group, origin, raw, collector) -> None:
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
        host_vars[key] = _parse_ini_value(value)
    _declare_hosts(raw, group, pattern, host_vars, None, origin, collector)


# -- group_vars/ and host_vars/ ----------------------------------------------------------


def _vars_files(directory: Path, name: str) -> list[Path]:
    """Ansible's lookup: <name> (file or dir), else <name>.yml, .yaml, .json."""
    for suffix in ("", *YAML_EXTENSIONS):
        candidate = directory / f"{name}{suffix}"
        if candidate.is_dir():
            return _dir_vars_files(candidate)
        if candidate.is_file():
            return [candidate]
    return []


def _dir_vars_files(directory: Path) -> list[Path]:
    found = []
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name.endswith("~"):
            continue
        if entry.is_dir() and not entry.suffix:
            found.extend(_dir_vars_files(entry))
        elif entry.is_file() and (not entry.suffix or entry.suffix in YAML_EXTENSIONS):
            found.append(entry)
    return found


def _read_vars_dirs(raw: RawInventory, collector: FindingCollector) -> None:
    for dirname, known, target in (
        ("group_vars", raw.groups, lambda n: raw.groups[n].plugin_vars),
        ("host_vars", raw.hosts, lambda n: raw.hosts[n].plugin_vars),
    ):
        directory = raw.root / dirname
        if not directory.is_dir():
            continue
        for name in known:
            for path in _vars_files(directory, name):
                _load_vars_file(path, target(name), collector)
        _report_orphans(directory, known, dirname, collector)


def _load_vars_file(path: Path, target: dict[str, Located], collector) -> None:
    text = _read_text(path, collector)
    if text is None:
        return
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            collector.error(f"malformed JSON: {error.msg}", origin=Origin(path, error.lineno))
            return
    else:
        data = _load_yaml_file(path, text, collector)
    if data is None:
        return
    if not isinstance(data, dict):
        collector.error(
            "a vars file must be a mapping of variable names to values", origin=Origin(path, 1)
        )
        return
    for key, value in data.items():
        _set_var(target, key, value, Origin(path, _line_of(data, key)))


def _report_orphans(directory: Path, known: dict, dirname: str, collector) -> None:
    kind = "group" if dirname == "group_vars" else "host"
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith("."):
            continue
        stem = (
            entry.name
            if entry.is_dir()
            else entry.stem
            if entry.suffix in YAML_EXTENSIONS
            else entry.name
        )
        if stem not in known:
            collector.warning(
                f"{dirname}/{entry.name} names {kind} '{stem}', which the inventory does not "
                "have; Ansible ignores it",
                origin=Origin(entry),
                hint=f"rename it after an existing {kind} or remove it",
            )
