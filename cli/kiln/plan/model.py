"""The Plan: everything a provision run will do, decided before any host is contacted.

Immutable. `kiln plan` prints one; `kiln provision` hands one to kiln.runner, which executes it
and neither plans nor renders.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kiln.inventory import Cluster, Node
from kiln.inventory.batches import disruption_budget
from kiln.inventory.export import render_inventory
from kiln.inventory.receptor_spec import ReceptorSpec
from kiln.plan.files import GeneratedFile
from kiln.plan.rolling import Rolling, stage_rolling
from kiln.plan.shards import Shard, narrowed
from kiln.plan.stages import Stage
from kiln.render.hostlist import compress

RUN_INVENTORY = "run"  # the export of every node, beside the per-shard ones


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """What the operator asked for; None means the inventory's kiln_rollout value."""

    stages: tuple[Stage, ...] | None = None  # None: every available stage
    limit: str | None = None
    check: bool = False
    retry_failed: bool = False
    new_nodes: bool = False  # full stages on never-provisioned nodes; refresh the others
    batch_size: str | None = None
    forks: int | None = None
    shard_by: str | None = None
    shard_size: int | None = None
    max_parallel_shards: int | None = None
    extravars: Mapping[str, Any] = field(default_factory=dict)
    # --new-nodes: the nodes that have joined, from the cluster's shared state (kiln.state);
    # None: this state dir's run records say.
    joined: frozenset[str] | None = None
    # Drift-aware re-apply (kiln.drift): stage -> the hosts whose stage is unchanged, left out.
    skip: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rollout:
    """The rollout settings in force: the inventory's kiln_rollout with the options applied."""

    batch_size: str  # as Ansible's serial takes it: "8" or "25%"
    max_fail_percentage: int
    forks: int
    max_parallel_shards: int  # 0: as many as fit controller_memory_gib
    controller_memory_gib: float
    worker_runner: str
    worker_transport: str = "ssh"  # or "receptor" (kiln.runner.workers.transport)
    receptor: ReceptorSpec | None = None


@dataclass(frozen=True, slots=True)
class StagePlan:
    stage: Stage
    hosts: tuple[str, ...]
    batches: tuple[tuple[str, ...], ...]  # the rolling batches over the whole stage
    shards: tuple[Shard, ...]
    parallel: int = 1  # compute shards run at once (kiln.plan.shards.parallel_limit)

    @property
    def name(self) -> str:
        return self.stage.name

    @property
    def summary(self) -> str:
        return self.stage.summary


@dataclass(frozen=True, slots=True)
class NewNodes:
    """`--new-nodes`: which targets are new, and which only get the cluster-wide files."""

    new: tuple[str, ...]
    existing: tuple[str, ...]
    refreshed: tuple[str, ...]

    def to_dict(self) -> dict[str, list[str]]:
        return {
            "new": list(self.new),
            "existing": list(self.existing),
            "refreshed": list(self.refreshed),
        }


@dataclass(frozen=True)
class Export:
    """One inventory export: the hosts its hosts.json holds, and that file's text.

    The text is rendered from the model on first read and kept: a run reads every export once,
    while `kiln plan`, which reads none, does not pay for rendering them (about as much again
    as the whole plan at 12,500 nodes).
    """

    name: str
    hosts: tuple[str, ...]
    cluster: Cluster = field(repr=False, compare=False)

    @cached_property
    def text(self) -> str:
        return render_inventory(self.cluster, list(self.hosts))


@dataclass(frozen=True)
class Plan:
    cluster: Cluster
    options: PlanOptions
    rollout: Rollout
    targets: tuple[str, ...]
    stages: tuple[StagePlan, ...]
    files: tuple[GeneratedFile, ...]  # slurm.conf, gres.conf, cgroup.conf, topology.conf
    etc_hosts: GeneratedFile
    # The inventory exports: RUN_INVENTORY (every node), then one per shard name (its hosts in
    # every stage, plus the controllers).
    exports: Mapping[str, Export] = field(default_factory=lambda: MappingProxyType({}))
    workers: Mapping[str, Node] = field(default_factory=lambda: MappingProxyType({}))
    new_nodes: NewNodes | None = None

    @property
    def inventory_dir(self) -> Path:
        return Path(self.cluster.inventory_dir).resolve()

    def shards_left(self, stage: StagePlan, hosts: Collection[str]) -> tuple[Shard, ...]:
        """The stage's shards on `hosts` only (those earlier stages left to it), each with the
        batches its hosts make; a shard left without hosts is dropped."""
        if len(hosts) == len(stage.hosts):  # nothing held back: the shards as planned
            return stage.shards
        keep = set(hosts)
        shards = (narrowed(shard, keep, self.rollout.batch_size) for shard in stage.shards)
        return tuple(shard for shard in shards if shard.hosts)

    def rolling(self, stage: StagePlan) -> Rolling | None:
        """How the stage's disruptive changes (kiln.plan.rolling) would roll; None: it has none."""
        return stage_rolling(stage, self.cluster, self.rollout)

    def disruption_budget(self, stage: str) -> int:
        """The most of stage `stage`'s nodes out of service at once over all its shards, which
        every shard's slurm_maintenance drain holds in Slurm (kiln_disruption_budget)."""
        hosts = next((s.hosts for s in self.stages if s.name == stage), ())
        return disruption_budget(self.rollout.batch_size, len(hosts))

    def to_dict(self, changed_files: list[str] | None = None) -> dict:
        """`kiln plan --json`; `changed_files` are those that differ from --output's."""
        return {
            "cluster": self.cluster.name,
            "inventory": str(self.cluster.inventory_dir),
            "versions": self.cluster.versions.model_dump(exclude_none=True),
            "stages": [
                {
                    "name": s.name,
                    "summary": s.summary,
                    "host_count": len(s.hosts),
                    "hosts": compress(list(s.hosts)),
                    "batches": [compress(list(b)) for b in s.batches],
                    "rolling": rolling.to_dict() if (rolling := self.rolling(s)) else None,
                }
                for s in self.stages
            ],
            "files": [
                {"name": f.name, "sha256": f.sha256, "lines": f.content.count("\n")}
                for f in self.files
            ],
            "changed_files": changed_files or [],
        }
