"""The core that talks to Slurm: every Slurm command kiln issues, over SSH on the controller.

    result = drain(cluster, nodes, "disk swap")          # OpResult: per-node before/after
    result = resume(cluster, nodes, force=False)         # resumes `kiln drain`'s drains only
    status = cluster_status(cluster)                     # ClusterStatus: inventory vs Slurm
    found = inspect_node(cluster, node)                  # Inspection: declared vs shown
    held = held_accounting(cluster)                      # what sacctmgr shows (kiln.accounting)
    ctl = Controller(cluster, root=True)                 # burn-in: reservations, sbatch, squeue

Command lines are built in `commands` with shlex.quote; node state and drain reasons are read
in one place (`state`: NodeState; kind and operation of a drain: kiln.parsers.drain_reason);
Slurm that cannot be read is an error in Slurm's words, never "not in Slurm"; nothing
here prints.
"""

from __future__ import annotations

from kiln.slurmctl.accounts import held_accounting
from kiln.slurmctl.inspect import Inspection, inspect_node
from kiln.slurmctl.ops import NodeChange, OpResult, drain, resume
from kiln.slurmctl.remote import Controller
from kiln.slurmctl.state import NodeState
from kiln.slurmctl.status import ClusterStatus, cluster_status

__all__ = [
    "ClusterStatus",
    "Controller",
    "Inspection",
    "NodeChange",
    "NodeState",
    "OpResult",
    "cluster_status",
    "drain",
    "held_accounting",
    "inspect_node",
    "resume",
]
