"""Ansible host patterns (`--limit`) evaluated against the Cluster model.

kiln needs the hosts a limit selects before it starts Ansible: to refuse a limit that selects
nothing, to count batches, and to tell hosts the play never reached from hosts outside the limit.
Semantics follow Ansible's: patterns joined by `,` (or `:`); plain patterns are unions, `&x`
intersections, `!x` exclusions, applied in that order; a pattern is `all`, `*`, a host, a group,
a shell wildcard over hosts and groups, or `~regex`. Unlike Ansible, a pattern that matches no
host or group of the inventory is an error naming it (`!gpu0001` for `gpu001` would otherwise
exclude nothing and run everywhere).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from typing import Protocol

from kiln.errors import InvalidInputError


class _Node(Protocol):
    name: str
    groups: list[str]


def split_patterns(limit: str) -> list[str]:
    parts = limit.split(",") if "," in limit else re.split(r":(?![^\[]*\])", limit)
    return [part.strip() for part in parts if part.strip()]


def _matches(pattern: str, node: _Node) -> bool:
    return _matches_name(pattern, [node.name, *node.groups])


def _matches_name(pattern: str, names: Sequence[str]) -> bool:
    if pattern in ("all", "*"):
        return True
    if pattern.startswith("~"):
        regex = re.compile(pattern[1:])
        return any(regex.match(name) for name in names)
    if any(ch in pattern for ch in "*?["):
        return any(fnmatchcase(name, pattern) for name in names)
    return pattern in names


def check_patterns(limit: str, nodes: Sequence[_Node], groups: Iterable[str] = ()) -> None:
    """InvalidInputError naming every pattern of `limit` that matches no host or group of the
    inventory (`nodes`: all of them; `groups`: every group name, empty ones too), or that is
    not a valid regular expression."""
    names = sorted({name for node in nodes for name in (node.name, *node.groups)} | set(groups))
    unmatched = []
    for pattern in split_patterns(limit):
        body = pattern.lstrip("&!")
        try:
            if not body or not _matches_name(body, names):
                unmatched.append(pattern)
        except re.error as error:
            raise InvalidInputError(f"--limit: {pattern!r} is not a valid regex: {error}") from None
    if unmatched:
        raise InvalidInputError(
            f"--limit {limit!r}: {', '.join(map(repr, unmatched))} "
            f"match{'es' if len(unmatched) == 1 else ''} no host or group of the inventory",
            hint="a typo in an exclusion (`!gpu0001`) would otherwise run on every host",
        )


def select_hosts(nodes: Sequence[_Node], limit: str | Iterable[str] | None) -> list[str]:
    """Names of the nodes a limit selects, in inventory order."""
    patterns = split_patterns(limit) if isinstance(limit, str) else list(limit or [])
    if not patterns:  # no limit selects every node: no need to match each against `all`
        return [node.name for node in nodes]
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
