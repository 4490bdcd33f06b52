"""Which changes each stage rolls through its nodes, and how the batches go: one table.

A disruptive change (one that kills jobs or needs a reboot) runs batch by batch, each node
drained and emptied of jobs first (the slurm_maintenance role's rolling step): drain, wait for
jobs up to a deadline, apply, check, resume only what the run drained; the play's
`max_fail_percentage` stops the rollout. Shards run in parallel, each batch by batch, and the
role's drain takes room in a disruption budget kept in Slurm (at most the batch size, or its
percentage of the stage's hosts, out of service at once over all shards). Each role decides
per node whether ITS change is disruptive there (a different version on a node that already has
one; a first install is not, since a new node is quarantined until burn-in passes); this table
is what `kiln plan` shows
from that, offline. No role installs or changes a kernel (the base role holds it): kernel
changes are not kiln's to roll.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kiln.inventory.batches import batches_needed, disruption_budget, hosts_per_batch

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
    """How a stage's disruptive changes would roll in this plan.

    Each shard runs batches of its own, in parallel with the other shards, so `batches` and
    `largest_batch` are the shards' (what the runner expects); `budget` is how many nodes may
    be out of service at once over all shards together, which the slurm_maintenance role holds
    in Slurm (kiln.inventory.batches.disruption_budget).
    """

    changes: tuple[Disruptive, ...]
    batch_size: str
    batches: int  # over all shards
    largest_batch: int  # the largest batch of any shard
    shards: int
    budget: int  # nodes out of service at once, over all shards
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
            "shards": self.shards,
            "disruption_budget": self.budget,
            "max_fail_percentage": self.max_fail_percentage,
            "drain_timeout_s": self.drain_timeout_s,
            "drain_timeout_var": self.timeout_var,
        }

    def describe(self) -> str:
        return (
            f"{self.batches} batch(es) of up to {self.largest_batch} in {self.shards} shard(s); "
            f"at most {self.budget} node(s) out of service at once over all shards; "
            f"stops when more than "
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
    sizes = [len(shard.hosts) for shard in stage.shards]
    return Rolling(
        changes=changes.changes,
        batch_size=rollout.batch_size,
        batches=sum(batches_needed(size, rollout.batch_size) for size in sizes),
        largest_batch=max((hosts_per_batch(rollout.batch_size, size) for size in sizes), default=0),
        shards=len(sizes),
        budget=disruption_budget(rollout.batch_size, len(stage.hosts)),
        max_fail_percentage=rollout.max_fail_percentage,
        drain_timeout_s=max((w for w in waits if w is not None), default=DEFAULT_DRAIN_TIMEOUT_S),
        timeout_var=changes.timeout_var,
    )
