"""Time to cluster: a bring-up of N nodes projected from what a measured run cost.

The measured run is a provision run record whose stages carry their cost (`seconds`,
`controller_cpu_s`: kiln.runner.execute) and, when there is one, a burn-in record's
timings.json. Per stage the projection takes the larger of two bounds and names it:

- controller CPU: N x (the stage's controller CPU seconds per host) / the cores of the
  machines running shards (the controller's, or every worker controller's: `machines`);
- rolling batches: the rounds of batches the rollout needs (ceil(shards / shards at once) x
  batches per shard, with kiln's own rule for shards at once: kiln.plan.shards.parallel_limit,
  per machine) x the measured seconds of one batch (a shard's wall time / its batches, the
  median shard).
  A batch holds at most `forks` hosts at once, so this is where forks and shard size show.

The provisioning is the sum of its stages, unless the mirror is slower: N x the bytes a node
downloads / the mirror's bandwidth, when both are given. Burn-in: the per-node jobs and the
fabric all-reduce run on every node at once (their measured seconds), then the pairwise pass
takes at most the Locator's three rounds (kiln.judging.locate.MAX_ROUNDS; one for a fleet of
two) of the measured round time, whatever N. The slowest of controller CPU, rolling batches,
mirror bandwidth and burn-in length is named the bottleneck.

What it leaves out, and says: the measured batch time includes the measuring controller's own
contention (a larger controller is faster than projected); Slurm's job start rate past the
measured run's size is assumed to keep up.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kiln.errors import InvalidInputError
from kiln.judging.locate import MAX_ROUNDS
from kiln.judging.pairs import default_rounds
from kiln.plan.shards import parallel_limit

CONTROLLER_CPU = "controller CPU"
ROLLING_BATCHES = "rolling batches (shards x forks)"
MIRROR = "mirror bandwidth"
BURNIN = "burn-in length"
FLEET_SCALE = 12_500  # the 100,000-GPU site every estimate is also projected to


@dataclass(frozen=True)
class MeasuredStage:
    name: str
    hosts: int
    seconds: float
    controller_cpu_s: float
    batch_seconds: float  # one batch of one shard, the median shard
    batch_hosts: float  # hosts in that batch

    @property
    def cpu_per_host(self) -> float:
        return self.controller_cpu_s / self.hosts


@dataclass(frozen=True)
class MeasuredBurnin:
    nodes: int
    jobs_seconds: float  # per-node jobs and the fabric all-reduce, every node at once
    pair_rounds: int
    pairs_seconds: float


@dataclass(frozen=True)
class Target:
    """The bring-up projected: its size, the controller and the rollout it runs with."""

    nodes: int
    cpus: int
    memory_gib: float
    forks: int
    shard_size: int
    batch_size: int  # hosts per rolling batch inside a shard
    mirror_gbps: float | None = None
    node_download_gib: float | None = None
    # the machines that run compute shards: the kiln_workers (each of `cpus` cores and
    # `memory_gib`), or this controller alone (1)
    machines: int = 1


@dataclass(frozen=True)
class StageEstimate:
    name: str
    seconds: float
    bound: str
    cpu_seconds: float
    batch_seconds: float
    rounds: int
    shards: int
    parallel: int


@dataclass
class Estimate:
    target: Target
    stages: list[StageEstimate] = field(default_factory=list)
    mirror_seconds: float | None = None
    burnin_seconds: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def provision_seconds(self) -> float:
        stages = sum(stage.seconds for stage in self.stages)
        return max(stages, self.mirror_seconds or 0.0)

    @property
    def total_seconds(self) -> float:
        return self.provision_seconds + (self.burnin_seconds or 0.0)

    @property
    def bottleneck(self) -> str:
        """The bound that costs the most time of the whole bring-up."""
        spent: dict[str, float] = {}
        for stage in self.stages:
            spent[stage.bound] = spent.get(stage.bound, 0.0) + stage.seconds
        if self.mirror_seconds is not None and self.mirror_seconds > sum(spent.values()):
            spent = {MIRROR: self.mirror_seconds}
        if self.burnin_seconds is not None:
            spent[BURNIN] = self.burnin_seconds
        return max(spent, key=lambda bound: spent[bound]) if spent else "nothing measured"

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.target.nodes,
            "controller": {
                "cpus": self.target.cpus,
                "memory_gib": self.target.memory_gib,
                "forks": self.target.forks,
                "machines": self.target.machines,
            },  # fmt: skip
            "stages": [
                {
                    "name": s.name,
                    "seconds": round(s.seconds, 1),
                    "bound": s.bound,
                    "cpu_seconds": round(s.cpu_seconds, 1),
                    "batch_seconds": round(s.batch_seconds, 1),
                    "rounds": s.rounds,
                    "shards": s.shards,
                    "parallel": s.parallel,
                }  # fmt: skip
                for s in self.stages
            ],
            "mirror_seconds": _rounded(self.mirror_seconds),
            "provision_seconds": round(self.provision_seconds, 1),
            "burnin_seconds": _rounded(self.burnin_seconds),
            "total_seconds": round(self.total_seconds, 1),
            "bottleneck": self.bottleneck,
            "notes": self.notes,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _seconds_between(started: str | None, finished: str | None) -> float | None:
    if not started or not finished:
        return None
    try:
        return (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
    except ValueError:
        return None


def measured_stages(summary: Mapping[str, Any]) -> list[MeasuredStage]:
    """The stages of a provision run's summary that ran and carry their cost."""
    measured = []
    for stage in summary.get("stages", ()):
        seconds, cpu = stage.get("seconds"), stage.get("controller_cpu_s")
        hosts = len(stage.get("hosts", {}))
        if seconds is None or cpu is None or not hosts or stage.get("status") == "skipped":
            continue
        per_batch, batch_hosts = [], []
        for shard in stage.get("shards") or ():
            wall = _seconds_between(shard.get("started"), shard.get("finished"))
            batches = shard.get("expected_batches") or 0
            if wall is not None and batches and shard.get("name") != "controllers":
                per_batch.append(wall / batches)
                batch_hosts.append(len(shard.get("hosts", ())) / batches)
        measured.append(
            MeasuredStage(
                stage["name"], hosts, seconds, cpu,
                statistics.median(per_batch) if per_batch else seconds,
                statistics.median(batch_hosts) if batch_hosts else hosts,
            )
        )  # fmt: skip
    return measured


def measured_burnin(timings: Mapping[str, Any]) -> MeasuredBurnin | None:
    """A burn-in record's timings.json (kiln.records.burnin.write_timings), or None."""
    try:
        seconds = timings["seconds"]
        return MeasuredBurnin(
            nodes=int(timings["nodes"]),
            jobs_seconds=float(seconds["jobs"]),
            pair_rounds=int(timings.get("pair_rounds", 0)),
            pairs_seconds=float(seconds.get("pairs", 0.0)),
        )
    except (KeyError, TypeError, ValueError):
        return None


def estimate(
    stages: Sequence[MeasuredStage], target: Target, burnin: MeasuredBurnin | None = None
) -> Estimate:
    """Project the measured run onto `target` (pure: the unit tests re-derive it by hand)."""
    if not stages:
        raise InvalidInputError(
            "the run record has no stage with its measured cost (seconds, controller CPU)",
            hint="run `kiln provision` with this kiln first: older records do not carry it",
        )
    result = Estimate(target)
    shard_hosts = min(target.shard_size, target.nodes)
    shards = math.ceil(target.nodes / target.shard_size)
    batches = math.ceil(shard_hosts / max(1, min(target.batch_size, shard_hosts)))
    parallel = parallel_limit(
        0, shards, target.cpus, forks=target.forks, memory_gib=target.memory_gib,
        machines=target.machines,
    )  # fmt: skip
    rounds = math.ceil(shards / parallel) * batches
    batch_hosts = min(target.batch_size, shard_hosts)
    for stage in stages:
        cpu = target.nodes * stage.cpu_per_host / (target.cpus * target.machines)
        # a batch runs `forks` hosts at a time: a larger batch than measured takes more waves
        waves = math.ceil(batch_hosts / target.forks) / math.ceil(stage.batch_hosts / target.forks)
        batch_bound = rounds * stage.batch_seconds * max(1.0, waves)
        bound = CONTROLLER_CPU if cpu > batch_bound else ROLLING_BATCHES
        result.stages.append(
            StageEstimate(
                stage.name,
                max(cpu, batch_bound),
                bound,
                cpu,
                stage.batch_seconds,
                rounds,
                shards,
                parallel,
            )  # fmt: skip
        )
    if target.mirror_gbps and target.node_download_gib:
        result.mirror_seconds = target.nodes * target.node_download_gib * 8 / target.mirror_gbps
    else:
        result.notes.append(
            "mirror bandwidth not assessed: give --mirror-gbps and --node-download-gib"
        )
    if burnin is not None:
        per_round = burnin.pairs_seconds / burnin.pair_rounds if burnin.pair_rounds else 0.0
        rounds = min(MAX_ROUNDS, default_rounds(target.nodes))  # the Locator's, at most
        result.burnin_seconds = burnin.jobs_seconds + rounds * per_round
    else:
        result.notes.append("burn-in not assessed: no burn-in record with its timings")
    result.notes.append(
        "the measured batch time includes the measuring controller's own contention: a larger "
        "controller than the measuring one is faster than projected"
    )
    return result
