"""The desired state's fingerprint: one hash per node and stage of everything that applies to it.

A stage's fingerprint on a node changes when anything that could change what the stage does there
changes:

- the code: the stage's playbook, every role it can reach (named in the playbook or in a reached
  role's files, include_role and meta dependencies alike: a name that appears is enough, so the
  closure errs towards more), the playbooks' filter plugins and modules, and the kiln packages
  those plugins import (kiln.render, kiln.parsers, ...);
- the cluster-wide files the stage's roles read (slurm.conf & co. when a role reads
  slurm_common_rendered_dir, /etc/hosts when one reads base_hosts_file), the run's extra vars
  and the groups (roles read `groups[...]` and other hosts' ansible_host);
- the node's own variables as kiln.inventory.export writes them, versions included.

Pure: reads the playbooks from disk once per call, contacts no host. kiln.drift compares these
with what each node recorded (/var/lib/kiln/applied/<stage>.json).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from kiln.inventory import Cluster
from kiln.inventory.export import resolved_vars
from kiln.inventory.yamlfile import VaultValue
from kiln.paths import PLAYBOOKS_DIR
from kiln.plan.model import Plan
from kiln.plan.stages import Stage

SCHEMA = "kiln-fingerprint/1"  # bumped when what goes into a fingerprint changes
PLUGIN_DIRS = ("filter_plugins", "library", "module_utils", "strategy_plugins")
# A role variable naming a directory of the plan's rendered files -> which of them it reads.
FILE_VARIABLES = {"slurm_common_rendered_dir": "cluster", "base_hosts_file": "hosts"}
KILN_IMPORT = re.compile(r"^\s*(?:from|import)\s+kiln\.(\w+)", re.MULTILINE)


def _default(value: object) -> object:
    if isinstance(value, VaultValue):
        return {"vault": value.ciphertext}
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value, key=str) if isinstance(value, (set, frozenset)) else list(value)
    return str(value)


def digest_of(value: object) -> str:
    """sha256 of a JSON value, keys sorted: the same data always hashes the same."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=_default)
    return hashlib.sha256(text.encode()).hexdigest()


def _files(paths: Iterable[Path], base: Path) -> list[tuple[str, str]]:
    """(relative path, sha256) of every regular file under `paths`, sorted; caches skipped."""
    found = []
    for path in paths:
        members = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        for member in members:
            if member.is_file() and "__pycache__" not in member.parts:
                rel = str(member.relative_to(base))
                found.append((rel, hashlib.sha256(member.read_bytes()).hexdigest()))
    return sorted(set(found))


def stage_roles(playbook: Path, roles_dir: Path) -> list[str]:
    """The roles a stage's playbook can reach: names that appear in the playbook, then in the
    files of each role reached, until nothing new appears."""
    names = sorted(p.name for p in roles_dir.iterdir() if p.is_dir()) if roles_dir.is_dir() else []
    if not names:
        return []
    pattern = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")
    reached: set[str] = set()
    texts = [playbook.read_text()]
    while texts:
        found = {m for text in texts for m in pattern.findall(text)} - reached
        reached |= found
        texts = [
            f.read_text(errors="replace")
            for role in sorted(found)
            for f in sorted((roles_dir / role).rglob("*"))
            if f.is_file() and "__pycache__" not in f.parts
        ]
    return sorted(reached)


def code_digest(stage: Stage, playbooks_dir: Path = PLAYBOOKS_DIR) -> tuple[str, set[str]]:
    """The stage's code hash, and which of the plan's rendered file sets its roles read."""
    playbook = stage.path(playbooks_dir)
    roles_dir = playbooks_dir / "roles"
    roles = stage_roles(playbook, roles_dir)
    role_paths = [roles_dir / role for role in roles]
    plugins = [playbooks_dir / name for name in PLUGIN_DIRS]
    kiln_dir = Path(__file__).resolve().parents[1]
    imported = {
        name
        for path, _ in _files(plugins, playbooks_dir)
        if path.endswith(".py")
        for name in KILN_IMPORT.findall((playbooks_dir / path).read_text())
    }
    kiln_code = [kiln_dir / name for name in sorted(imported)]
    parts = {
        "playbook": _files([playbook], playbooks_dir),
        "roles": _files(role_paths, playbooks_dir),
        "plugins": _files(plugins, playbooks_dir),
        "kiln": _files(kiln_code, kiln_dir),
    }
    reads = set()
    for path in role_paths:
        text = "\n".join(f.read_text(errors="replace") for f in path.rglob("*.yml"))
        reads |= {kind for variable, kind in FILE_VARIABLES.items() if variable in text}
    return digest_of(parts), reads


def memberships(cluster: Cluster) -> dict[str, list[str]]:
    """host -> the groups it belongs to, sorted: one pass over the groups (asking each group
    for each host was quadratic in the fleet)."""
    member_of: dict[str, list[str]] = {}
    for group in sorted(cluster.groups):
        for host in cluster.groups[group]:
            member_of.setdefault(host, []).append(group)
    return member_of


def node_digest(
    cluster: Cluster, name: str, member_of: Mapping[str, list[str]], versions: Mapping
) -> str:
    """What kiln.inventory.export hands Ansible for this node: its variables, the versions
    (`cluster.versions.model_dump()`, dumped once per run) and the groups it belongs to
    (`member_of`: memberships(cluster))."""
    return digest_of(
        {
            "vars": resolved_vars(cluster.node(name)),
            "versions": versions,
            "groups": member_of.get(name, []),
        }
    )


def fingerprints(
    plan: Plan, playbooks_dir: Path = PLAYBOOKS_DIR, hosts: Iterable[str] | None = None
) -> dict[str, dict[str, str]]:
    """stage name -> node -> the fingerprint, for every stage of the plan and its hosts (or
    `hosts`, for stages the plan does not run there: `kiln plan --live` asks for every node)."""
    cluster = plan.cluster
    rendered = {
        "cluster": {f.name: f.sha256 for f in plan.files},
        "hosts": {plan.etc_hosts.name: plan.etc_hosts.sha256},
    }
    shared = {
        "schema": SCHEMA,
        "groups": {group: list(members) for group, members in sorted(cluster.groups.items())},
        "extravars": dict(plan.options.extravars),
    }
    per_node: dict[str, str] = {}
    member_of = memberships(cluster)
    versions = cluster.versions.model_dump(exclude_none=True)
    result: dict[str, dict[str, str]] = {}
    for planned in plan.stages:
        code, reads = code_digest(planned.stage, playbooks_dir)
        stage_part = digest_of(
            {**shared, "stage": planned.name, "code": code, "files": _pick(rendered, reads)}
        )
        wanted = planned.hosts if hosts is None else tuple(hosts)
        for host in wanted:
            if host not in per_node:
                per_node[host] = node_digest(cluster, host, member_of, versions)
        result[planned.name] = {h: digest_of([stage_part, per_node[h]]) for h in wanted}
    return result


def _pick(rendered: Mapping[str, Mapping[str, str]], reads: set[str]) -> dict:
    return {kind: dict(rendered[kind]) for kind in sorted(reads)}
