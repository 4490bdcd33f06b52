"""Which nodes a burn-in tests: the selected compute nodes, as far as Slurm lets them run.

A node kiln drained earlier (its reason is kiln's: a quarantined new node, a failed burn-in) is
tested; a node drained by someone else, down or not responding is skipped and left alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from kiln.errors import InvalidInputError
from kiln.fleet import select_nodes
from kiln.inventory import Cluster, Node
from kiln.slurmctl.state import NodeState

_UNUSABLE = ("down", "future", "unknown")


def select_compute(cluster: Cluster, selector: str | None) -> list[Node]:
    compute = {node.name for node in cluster.compute}
    chosen = [n for n in select_nodes(cluster, selector) if n.name in compute]
    if not chosen:
        raise InvalidInputError(
            f"--nodes {selector!r} selects no compute node" if selector else "no compute nodes"
        )
    return chosen


def classify(
    states: Mapping[str, NodeState], wanted: list[str]
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(nodes to test, {kiln-drained node: its reason}, {skipped node: why})."""
    usable: list[str] = []
    kiln_drained: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name in wanted:
        node = states.get(name)
        if node is None:
            skipped[name] = "not known to Slurm"
        elif node.drained_by_kiln:
            kiln_drained[name] = node.reason or ""
            usable.append(name)
        elif node.drained:
            skipped[name] = f"drained by someone else ({node.reason or 'no reason'})"
        elif node.base in _UNUSABLE or not node.responding:
            skipped[name] = f"Slurm state {node.base.upper()}"
        else:
            usable.append(name)
    return usable, kiln_drained, skipped
