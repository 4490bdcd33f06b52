"""Which changes each stage rolls through its nodes, and how the batches go: one table.

A disruptive change (one that kills jobs or needs a reboot) runs batch by batch, each node
drained and emptied of jobs first (the slurm_maintenance role's rolling step): drain, wait for
jobs up to a deadline, apply, check, resume only what the run drained; the play's
`max_fail_percentage` stops the rollout. Each role decides per node whether ITS change is
disruptive there (a different version on a node that already has one; a first install is not,
since a new node is quarantined until burn-in passes); this table is what `kiln plan` shows
from that, offline. No role installs or changes a kernel (the base role holds it): kernel
changes are not kiln's to roll.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiln.inventory import Cluster
    from kiln.plan.model import Rollout, StagePlan

DEFAULT_DRAIN_TIMEOUT_S = 3600  # the roles' default job wait (nvidia, nccl, infiniband)


@dataclass(frozen=True, slots=True)
class Disruptive:
    change: str
    reboot: bool

    def describe(self) -> str:
        return f"{self.change} (reboot)" if self.reboot else self.change


@dataclass(frozen=True, slots=True)
class StageChanges:
    changes: tuple[Disruptive, ...]
    timeout_var: str  # the inventory variable of the stage's job wait, in seconds


# stage name -> the disruptive changes its roles roll, as the roles decide them.
DISRUPTIVE: dict[str, StageChanges] = {
    "nvidia": StageChanges(
        (
            Disruptive("driver branch or version", reboot=True),
            Disruptive("fabric manager with the driver", reboot=True),
        ),
        "nvidia_driver_drain_timeout_s",
    ),
    "infiniband": StageChanges(
        (Disruptive("DOCA-OFED version (its rdma-core with it)", reboot=True),),
        "infiniband_drain_timeout_s",
    ),
    "nccl": StageChanges((Disruptive("NCCL version", reboot=False),), "nccl_drain_timeout_s"),
}


@dataclass(frozen=True, slots=True)
class Rolling:
    """How a stage's disruptive changes would roll in this plan."""

    changes: tuple[Disruptive, ...]
    batch_size: str
    batches: int
    largest_batch: int
    max_fail_percentage: int
    drain_timeout_s: int  # the longest job wait among the stage's hosts
    timeout_var: str

    def to_dict(self) -> dict:
        return {
            "disruptive": [c.change for c in self.changes],
            "reboot": [c.change for c in self.changes if c.reboot],
            "batch_size": self.batch_size,
            "batches": self.batches,
            "largest_batch": self.largest_batch,
            "max_fail_percentage": self.max_fail_percentage,
            "drain_timeout_s": self.drain_timeout_s,
            "drain_timeout_var": self.timeout_var,
        }

    def describe(self) -> str:
        return (
            f"{self.batches} batch(es) of up to {self.largest_batch}; stops when more than "
            f"{self.max_fail_percentage}% of a batch fails; waits up to {self.drain_timeout_s} s "
            "for jobs"
        )


def _seconds(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None  # a Jinja expression: the role's own reading decides


def stage_rolling(stage: StagePlan, cluster: Cluster, rollout: Rollout) -> Rolling | None:
    """The stage's rollout of disruptive changes; None for a stage that has none."""
    changes = DISRUPTIVE.get(stage.name)
    if changes is None or not stage.hosts:
        return None
    waits = [
        _seconds(cluster.node(host).hostvars.get(changes.timeout_var, DEFAULT_DRAIN_TIMEOUT_S))
        for host in stage.hosts
    ]
    return Rolling(
        changes=changes.changes,
        batch_size=rollout.batch_size,
        batches=len(stage.batches),
        largest_batch=max((len(batch) for batch in stage.batches), default=0),
        max_fail_percentage=rollout.max_fail_percentage,
        drain_timeout_s=max((w for w in waits if w is not None), default=DEFAULT_DRAIN_TIMEOUT_S),
        timeout_var=changes.timeout_var,
    )
