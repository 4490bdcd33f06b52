"""The InfiniBand fabric as a node sees it now: `ibnetdiscover` run over SSH (kiln.fleet).

`kiln fabric topology` without --from captures the fabric here; kiln.fabric.topology turns the
output into topology.conf and the disagreements with the inventory.
"""

from __future__ import annotations

from kiln.errors import InvalidInputError, OperationFailed
from kiln.inventory import Cluster, Node


def ibnetdiscover_node(cluster: Cluster, name: str | None) -> Node:
    """The node to run ibnetdiscover on: `name`, else the first opensm host, else the first
    node declaring HCAs."""
    names = {n.name for n in cluster.nodes}
    if name is not None:
        if name not in names:
            raise InvalidInputError(f"--node {name} is not in the inventory")
        return cluster.node(name)
    for host in cluster.ib.opensm_hosts:
        if host in names:
            return cluster.node(host)
    with_hcas = [n for n in cluster.nodes if n.ib_hcas]
    if not with_hcas:
        raise InvalidInputError(
            "no node in the inventory declares HCAs (kiln_ib_hcas) to run ibnetdiscover on",
            hint="give the fabric with --from FILE (ibnetdiscover output)",
        )
    return with_hcas[0]


def run_ibnetdiscover(node: Node, timeout: float = 300.0) -> str:
    """ibnetdiscover's output on `node`, over SSH, as root (kiln.fleet.as_root)."""
    from kiln.fleet import as_root, run_command  # paramiko only when it is used

    command = as_root(node, "ibnetdiscover")
    result = run_command([node], command, fanout=1, timeout=timeout).results[0]
    if result.status != "ok":
        why = result.error or result.stderr.strip()[-300:] or f"exit {result.exit_code}"
        raise OperationFailed(
            f"ibnetdiscover on {node.name} failed ({result.status}): {why}",
            hint="or run it there yourself and give the output with --from FILE",
        )
    return result.stdout
