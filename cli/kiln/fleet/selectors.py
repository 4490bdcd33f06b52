"""`--nodes` selection: which inventory nodes a selector names, in inventory order.

A selector is a comma-separated list of terms. A term is a host name, a group, a Slurm hostlist
(`gpu[001-040,042]`, whose names may be hosts or groups: `rack_r[01-03]`), a shell glob over host
and group names (`gpu0*`), or `all`. A term with `*` or `?` is a glob; one with only `[digits]`
is a hostlist, read as a glob (`rack_r0[34]`) only when some name it expands to is unknown.
`!term` excludes, `&term` intersects (Ansible's order: unions, then intersections, then
exclusions). Any term that matches nothing is an error naming
it, with the closest names: a typo never silently widens or narrows the run.
"""

from __future__ import annotations

import difflib
import re
from fnmatch import fnmatchcase

from kiln.errors import InvalidInputError
from kiln.inventory import Cluster, Node
from kiln.render.hostlist import HostlistError, compress, expand

_HOSTLIST = re.compile(r"\[[\d,\-]+\]")
_HINT = (
    "a selector is a comma list of host names, groups, hostlists (gpu[001-040]), "
    "globs (gpu0*), `all`, `&group` (intersection) and `!term` (exclusion)"
)


def split_terms(selector: str) -> list[str]:
    """Split on top-level commas; commas inside `[...]` belong to a hostlist."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth <= 0:
            terms.append(current.strip())
            current = ""
        else:
            current += char
    terms.append(current.strip())
    return [term for term in terms if term]


def _suggest(term: str, cluster: Cluster) -> str:
    candidates = [node.name for node in cluster.nodes] + sorted(cluster.groups)
    close = difflib.get_close_matches(term, candidates, n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _one(name: str, cluster: Cluster, hosts: set[str]) -> set[str] | None:
    if name in cluster.groups:
        return set(cluster.groups[name])
    if name in hosts:
        return {name}
    return None


def resolve_term(term: str, cluster: Cluster, hosts: set[str]) -> set[str]:
    """Host names one term selects; InvalidInputError when it selects none."""
    if term in ("all", "*"):
        return set(hosts)
    direct = _one(term, cluster, hosts)
    if direct is not None:
        return direct
    hostlist_error = None
    if _HOSTLIST.search(term) and not any(char in term for char in "*?"):
        try:
            names = expand(term)
        except HostlistError as error:
            raise InvalidInputError(f"--nodes: {error}", hint=_HINT) from error
        found = {name: _one(name, cluster, hosts) for name in names}
        missing = [name for name, members in found.items() if members is None]
        if not missing:
            return set().union(*found.values())
        hostlist_error = InvalidInputError(
            f"--nodes: {compress(missing)} (from {term!r}) not in the inventory"
            + _suggest(missing[0], cluster),
            hint=_HINT,
        )
    if any(char in term for char in "*?["):
        matched = {name for name in hosts if fnmatchcase(name, term)}
        for group, members in cluster.groups.items():
            if fnmatchcase(group, term):
                matched.update(members)
        if matched:
            return matched
    if hostlist_error is not None:
        raise hostlist_error
    raise InvalidInputError(
        f"--nodes: {term!r} matches no node or group in the inventory" + _suggest(term, cluster),
        hint=_HINT,
    )


def select_nodes(cluster: Cluster, selector: str | None) -> list[Node]:
    """The nodes `selector` names, in inventory order; every node when it is empty."""
    if selector is None or not selector.strip():
        return list(cluster.nodes)
    hosts = {node.name for node in cluster.nodes}
    union: set[str] | None = None
    narrowed, excluded = set(hosts), set()
    for term in split_terms(selector):
        op, body = (term[0], term[1:].strip()) if term[0] in "!&" else ("", term)
        if not body:
            raise InvalidInputError(f"--nodes: empty term {term!r} in {selector!r}", hint=_HINT)
        names = resolve_term(body, cluster, hosts)
        if op == "!":
            excluded |= names
        elif op == "&":
            narrowed &= names
        else:
            union = names if union is None else union | names
    chosen = ((hosts if union is None else union) & narrowed) - excluded
    if not chosen:
        raise InvalidInputError(
            f"--nodes {selector!r} selects no node (its exclusions and intersections remove "
            "every match)",
            hint=_HINT,
        )
    return [node for node in cluster.nodes if node.name in chosen]
