"""The core that talks to Slurm: scontrol and sinfo on the controller over SSH (kiln.fleet).

    result = drain(cluster, nodes, "disk swap")          # OpResult: per-node before/after
    result = resume(cluster, nodes, force=False)         # refuses drains kiln did not make
    status = cluster_status(cluster)                     # ClusterStatus: inventory vs Slurm
    found = inspect_node(cluster, node)                  # Inspection: declared vs shown
    summary = rotate_munge_key(cluster)                  # the slurm stage, munge_rotate_key

Command lines are built in `commands` with shlex.quote; nothing here prints.
"""

from __future__ import annotations

from typing import Any

from kiln.inventory import Cluster
from kiln.slurmctl.inspect import Inspection, inspect_node
from kiln.slurmctl.ops import NodeChange, OpResult, drain, resume
from kiln.slurmctl.remote import Controller
from kiln.slurmctl.state import NodeState
from kiln.slurmctl.status import ClusterStatus, cluster_status


def rotate_munge_key(cluster: Cluster, **kwargs: Any) -> dict[str, Any]:
    """kiln.slurmctl.munge.rotate_munge_key, imported on first use: the engine (ansible-runner)
    stays out of `kiln --help` and of the SSH-only commands."""
    from kiln.slurmctl.munge import rotate_munge_key as rotate

    return rotate(cluster, **kwargs)


__all__ = [
    "ClusterStatus",
    "Controller",
    "Inspection",
    "NodeChange",
    "NodeState",
    "OpResult",
    "cluster_status",
    "drain",
    "inspect_node",
    "resume",
    "rotate_munge_key",
]
