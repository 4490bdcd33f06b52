"""Variable precedence as Ansible applies it, with the origin of every winning value.

Ansible's default order (VARIABLE_PRECEDENCE), lowest first:
  all group vars in inventory files -> other groups' vars in inventory files ->
  group_vars/all -> group_vars/<group> -> host vars in inventory files -> host_vars/<host>,
where groups are ordered by (depth, ansible_group_priority, name) and each later source
replaces whole top-level keys (hash_behaviour=replace).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.inventory.findings import FindingCollector
from kiln.inventory.raw import Located, RawInventory


@dataclass(slots=True)
class ResolvedHost:
    name: str
    groups: list[str]  # every group the host belongs to, 'all' excluded, in precedence order
    vars: dict[str, Located]


def group_depths(raw: RawInventory, collector: FindingCollector) -> dict[str, int]:
    """Longest distance from 'all' for each group (Ansible's Group.depth); reports cycles."""
    depths = {"all": 0}
    visiting: set[str] = set()

    def visit(name: str, depth: int) -> None:
        if name in visiting:
            group = raw.groups[name]
            collector.error(
                f"group '{name}' is its own ancestor (a children cycle)",
                origin=group.origin,
                key=name,
            )
            return
        if depths.get(name, -1) >= depth and name != "all":
            return
        depths[name] = max(depth, depths.get(name, 0))
        visiting.add(name)
        for child in raw.groups[name].children:
            visit(child, depth + 1)
        visiting.discard(name)

    visit("all", 0)
    return depths


def host_groups(raw: RawInventory) -> dict[str, set[str]]:
    """Map each host to all groups it belongs to, directly or through children."""
    parents: dict[str, set[str]] = {name: set() for name in raw.groups}
    for name, group in raw.groups.items():
        for child in group.children:
            parents[child].add(name)

    ancestors_cache: dict[str, frozenset[str]] = {}

    def ancestors(name: str, trail: frozenset[str] = frozenset()) -> frozenset[str]:
        cached = ancestors_cache.get(name)
        if cached is not None:
            return cached
        result = {name}
        for parent in parents[name]:
            if parent not in trail:
                result |= ancestors(parent, trail | {name})
        ancestors_cache[name] = frozen = frozenset(result)
        return frozen

    membership: dict[str, set[str]] = {name: set() for name in raw.hosts}
    for name, group in raw.groups.items():
        if not group.hosts:
            continue
        expanded = ancestors(name)
        for host in group.hosts:
            membership[host] |= expanded
    for host, groups in membership.items():
        groups.add("all")
        if groups == {"all"}:
            groups.add("ungrouped")
            raw.groups["ungrouped"].hosts.append(host)
    return membership


def resolve_hosts(raw: RawInventory, collector: FindingCollector) -> dict[str, ResolvedHost]:
    depths = group_depths(raw, collector)
    membership = host_groups(raw)
    all_group = raw.groups["all"]

    def order(name: str) -> tuple:
        return (depths.get(name, 0), raw.groups[name].priority, name)

    # Hosts of one rack share their groups; merge each distinct group set once.
    merged_by_groups: dict[frozenset[str], tuple[list[str], dict[str, Located]]] = {}
    resolved: dict[str, ResolvedHost] = {}
    for name, host in raw.hosts.items():
        key = frozenset(membership[name])
        cached = merged_by_groups.get(key)
        if cached is None:
            ordered = sorted((g for g in key if g != "all"), key=order)
            merged: dict[str, Located] = dict(all_group.file_vars)
            for group in ordered:
                merged.update(raw.groups[group].file_vars)
            merged.update(all_group.plugin_vars)
            for group in ordered:
                merged.update(raw.groups[group].plugin_vars)
            cached = merged_by_groups[key] = (ordered, merged)
        ordered, merged = cached
        host_vars = dict(merged)
        host_vars.update(host.file_vars)
        host_vars.update(host.plugin_vars)
        resolved[name] = ResolvedHost(name, ordered, host_vars)
    return resolved
