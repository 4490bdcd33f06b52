"""The cluster as Slurm sees it, merged with the inventory and the last burn-in verdicts.

Every compute node of the inventory and every node Slurm knows gets one row. A compute node
Slurm does not know, and a Slurm node the inventory does not declare, are flagged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kiln.inventory import Cluster
from kiln.records.burnin_verdicts import UNKNOWN, Verdict, last_verdicts
from kiln.render.hostlist import compress
from kiln.slurmctl import commands
from kiln.slurmctl.leftovers import Leftover, read_leftovers
from kiln.slurmctl.remote import Controller, Runner
from kiln.slurmctl.state import NodeState, from_sinfo

NOT_IN_SLURM = "in the inventory, unknown to Slurm"
NOT_IN_INVENTORY = "in Slurm, not in the inventory"


@dataclass(slots=True)
class StatusRow:
    name: str
    in_inventory: bool
    slurm: NodeState | None
    declared_gpus: int | None
    burnin: Verdict = UNKNOWN
    flag: str | None = None

    @property
    def state(self) -> str:
        return self.slurm.state if self.slurm else "not in slurm"

    def to_dict(self) -> dict:
        slurm = self.slurm.to_dict() if self.slurm else None
        return {
            "name": self.name,
            "in_inventory": self.in_inventory,
            "in_slurm": self.slurm is not None,
            "state": self.slurm.state if self.slurm else None,
            "declared_gpus": self.declared_gpus,
            "slurm_gpus": self.slurm.gpus if self.slurm else None,
            "slurm": slurm,
            "burnin": self.burnin.to_dict(),
            "flag": self.flag,
        }


@dataclass(slots=True)
class ClusterStatus:
    cluster: str
    controller: str
    rows: list[StatusRow] = field(default_factory=list)
    unfinished: list[Leftover] = field(default_factory=list)  # burn-in runs that never ended

    def by_state(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for row in self.rows:
            groups.setdefault(row.state, []).append(row.name)
        return dict(sorted(groups.items()))

    @property
    def flagged(self) -> list[StatusRow]:
        return [row for row in self.rows if row.flag]

    def to_dict(self) -> dict:
        by_state = self.by_state()
        return {
            "cluster": self.cluster,
            "controller": self.controller,
            "counts": {state: len(names) for state, names in by_state.items()},
            "by_state": {state: compress(names) for state, names in by_state.items()},
            "flagged": {row.name: row.flag for row in self.flagged},
            "unfinished_burnins": [leftover.to_dict() for leftover in self.unfinished],
            "nodes": [row.to_dict() for row in self.rows],
        }


def merge(
    cluster: Cluster,
    slurm: Mapping[str, NodeState],
    controller: str,
    verdicts: Mapping[str, Verdict] | None = None,
) -> ClusterStatus:
    """Inventory compute nodes in inventory order, then Slurm-only nodes in Slurm's order."""
    verdicts = verdicts or {}
    status = ClusterStatus(cluster.name, controller)
    declared = {node.name: node for node in cluster.nodes}
    for node in cluster.nodes:
        state = slurm.get(node.name)
        if not node.is_compute and state is None:
            continue  # a controller is not expected to be a Slurm node
        row = StatusRow(node.name, True, state, node.gpu_count, verdicts.get(node.name, UNKNOWN))
        if state is None:
            row.flag = NOT_IN_SLURM
        status.rows.append(row)
    for name, state in slurm.items():
        if name not in declared:
            status.rows.append(StatusRow(name, False, state, None, flag=NOT_IN_INVENTORY))
    return status


def cluster_status(
    cluster: Cluster, *, runner: Runner | None = None, state: Path | None = None
) -> ClusterStatus:
    """The merged status, and the burn-in runs a kill left behind (one SSH exec for all)."""
    ctl = Controller(cluster, **({"runner": runner} if runner else {}))
    nodes, shown, queued = ctl.run(
        [commands.sinfo(), commands.show_reservations(), commands.jobs_by_reservation()],
        check=False,
    )
    if nodes.exit_code != 0:
        raise ctl.failure(nodes)
    slurm = from_sinfo(nodes.stdout)
    names = [node.name for node in cluster.nodes if node.is_compute or node.name in slurm]
    status = merge(cluster, slurm, ctl.name, last_verdicts(cluster.name, names, state))
    status.unfinished = read_leftovers(shown.stdout, queued.stdout)
    return status
