"""Ansible host patterns (`--limit`) evaluated against the Cluster model.

kiln needs the hosts a limit selects before it starts Ansible: to refuse a limit that selects
nothing, to count batches, and to tell hosts the play never reached from hosts outside the limit.
Semantics follow Ansible's: patterns joined by `,` (or `:`); plain patterns are unions, `&x`
intersections, `!x` exclusions, applied in that order; a pattern is `all`, `*`, a host, a group,
a shell wildcard over hosts and groups, or `~regex`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from typing import Protocol


class _Node(Protocol):
    name: str
    groups: list[str]


def split_patterns(limit: str) -> list[str]:
    parts = limit.split(",") if "," in limit else re.split(r":(?![^\[]*\])", limit)
    return [part.strip() for part in parts if part.strip()]


def _matches(pattern: str, node: _Node) -> bool:
    if pattern in ("all", "*"):
        return True
    names = [node.name, *node.groups]
    if pattern.startswith("~"):
        regex = re.compile(pattern[1:])
        return any(regex.match(name) for name in names)
    if any(ch in pattern for ch in "*?["):
        return any(fnmatchcase(name, pattern) for name in names)
    return pattern in names


def select_hosts(nodes: Sequence[_Node], limit: str | Iterable[str] | None) -> list[str]:
    """Names of the nodes a limit selects, in inventory order."""
    patterns = split_patterns(limit) if isinstance(limit, str) else list(limit or [])
    plain = [p for p in patterns if not p.startswith(("&", "!"))] or ["all"]
    both = [p[1:] for p in patterns if p.startswith("&")]
    excluded = [p[1:] for p in patterns if p.startswith("!")]
    return [
        node.name
        for node in nodes
        if any(_matches(p, node) for p in plain)
        and all(_matches(p, node) for p in both)
        and not any(_matches(p, node) for p in excluded)
    ]
