"""Read the files of an Ansible inventory directory, as Ansible reads them, keeping origins.

Produces a RawInventory (kiln.inventory.raw): groups (file vars, group_vars/ vars, children,
hosts) and hosts (file vars merged across declarations, host_vars/ vars), every value with its
file:line. Only what cannot be read is reported here; kiln.inventory.values types the values
and kiln.inventory.rules judges them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kiln.inventory.findings import FindingCollector, Origin
from kiln.inventory.ini import read_ini_inventory
from kiln.inventory.raw import (
    Located,
    RawInventory,
    declare_hosts,
    line_of,
    set_var,
    update_priority,
)
from kiln.inventory.secrets import from_encrypted_file, open_file, unlock_values
from kiln.inventory.vault import VaultConfig, is_encrypted_text
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


def read_inventory(
    path: Path, collector: FindingCollector, vault: VaultConfig | None = None
) -> RawInventory | None:
    """Read an inventory directory (or a single inventory file beside its *_vars dirs).

    With a vault, whole files encrypted with ansible-vault are read and every `!vault` value is
    decrypted (kiln.inventory.secrets); without one, an encrypted file is an error naming it
    and `!vault` values stay opaque.
    """
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
        encrypted = text is not None and is_encrypted_text(text)
        text = open_file(source, text, vault, collector)
        if text is None:
            continue
        if source.suffix in YAML_EXTENSIONS or (not source.suffix and _is_yaml_inventory(text)):
            _read_yaml_inventory(source, text, raw, collector, vault, encrypted)
        else:
            sealed = (lambda k, v: from_encrypted_file(k, v, vault)) if encrypted else None
            read_ini_inventory(source, text, raw, collector, sealed)
    _read_vars_dirs(raw, collector, vault)
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


def _load_yaml_file(
    path: Path,
    text: str,
    collector: FindingCollector,
    vault: VaultConfig | None = None,
    encrypted: bool = False,
) -> object:
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
    unlock_values(data, path, vault, collector, whole_file=encrypted)
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


# -- YAML inventories --------------------------------------------------------------------


def _read_yaml_inventory(path, text, raw, collector, vault=None, encrypted=False) -> None:
    data = _load_yaml_file(path, text, collector, vault, encrypted)
    if data is None:
        return
    if not isinstance(data, dict):
        collector.error(
            "an inventory file must be a mapping of groups (start with `all:`)",
            origin=Origin(path, 1),
        )
        return
    for group_name, body in data.items():
        origin = Origin(path, line_of(data, group_name))
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
        line = Origin(path, line_of(body, section))
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
                set_var(group.file_vars, key, var, Origin(path, line_of(value, key)))
            update_priority(group, collector)
        elif section == "children":
            for child, child_body in value.items():
                child_origin = Origin(path, line_of(value, child))
                raw.add_child(name, str(child), child_origin)
                _read_yaml_group(path, str(child), child_body, child_origin, raw, collector)
        else:
            for pattern, host_vars in value.items():
                host_origin = Origin(path, line_of(value, pattern))
                if host_vars is not None and not isinstance(host_vars, dict):
                    collector.error(
                        f"host '{pattern}' must map to its variables (or nothing)",
                        origin=host_origin,
                        key=str(pattern),
                    )
                    host_vars = None
                declare_hosts(raw, group, str(pattern), host_vars, path, host_origin, collector)


def _is_yaml_inventory(text: str) -> bool:
    """Ansible tries its yaml plugin first on a file without extension, then ini."""
    try:
        return isinstance(load_yaml(text), dict)
    except YamlError:
        return False


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


def _read_vars_dirs(raw: RawInventory, collector: FindingCollector, vault=None) -> None:
    for dirname, known, target in (
        ("group_vars", raw.groups, lambda n: raw.groups[n].plugin_vars),
        ("host_vars", raw.hosts, lambda n: raw.hosts[n].plugin_vars),
    ):
        directory = raw.root / dirname
        if not directory.is_dir():
            continue
        for name in known:
            for path in _vars_files(directory, name):
                _load_vars_file(path, target(name), collector, vault)
        _report_orphans(directory, known, dirname, collector)


def _load_vars_file(path: Path, target: dict[str, Located], collector, vault=None) -> None:
    text = _read_text(path, collector)
    encrypted = text is not None and is_encrypted_text(text)
    text = open_file(path, text, vault, collector)
    if text is None:
        return
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            collector.error(f"malformed JSON: {error.msg}", origin=Origin(path, error.lineno))
            return
        unlock_values(data, path, vault, collector, whole_file=encrypted)
    else:
        data = _load_yaml_file(path, text, collector, vault, encrypted)
    if data is None:
        return
    if not isinstance(data, dict):
        collector.error(
            "a vars file must be a mapping of variable names to values", origin=Origin(path, 1)
        )
        return
    for key, value in data.items():
        set_var(target, key, value, Origin(path, line_of(data, key)))


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
