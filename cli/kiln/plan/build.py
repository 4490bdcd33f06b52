"""make_plan: from a validated Cluster and the operator's options, the immutable Plan.

Which hosts each stage runs on (the --limit, --retry-failed and --new-nodes selections), their
rolling batches and shards, the rendered cluster-wide files and what each inventory export holds.
Reads earlier run records (for --retry-failed and --new-nodes) and contacts no host.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from kiln.errors import InvalidInputError
from kiln.inventory import Cluster
from kiln.inventory.batches import normalize_batch_size, split_batches
from kiln.plan.files import render_etc_hosts, render_files
from kiln.plan.hostpattern import check_patterns, select_hosts
from kiln.plan.model import (
    RUN_INVENTORY,
    Export,
    NewNodes,
    Plan,
    PlanOptions,
    Rollout,
    StagePlan,
)
from kiln.plan.shards import Shard, always_included, parallel_limit, plan_shards, worker_hosts
from kiln.plan.stages import REFRESH, Stage, available_stages, stage_hosts
from kiln.records.runs import provisioned_hosts, retry_hosts, runs_home


def make_plan(
    cluster: Cluster, options: PlanOptions | None = None, home: Path | None = None
) -> Plan:
    options = options or PlanOptions()
    home = home or runs_home()
    rollout = _rollout(cluster, options)
    targets = _targets(cluster, options, home)
    stages = _switched_on(cluster, options.stages)
    runs, new_nodes = _stage_hosts(cluster, options, stages, targets, home)
    shard_by = options.shard_by or cluster.rollout.shard_by
    shard_size = options.shard_size or cluster.rollout.shard_size
    workers = worker_hosts(cluster)
    shards: dict[tuple[str, ...], tuple] = {}  # most stages run on the same hosts: split once
    for _, hosts in runs:
        if tuple(hosts) not in shards:
            shards[tuple(hosts)] = tuple(
                plan_shards(
                    cluster,
                    hosts,
                    shard_by=shard_by,
                    shard_size=shard_size,
                    workers=workers,
                    batch_size=rollout.batch_size,
                )
            )
    planned = tuple(
        StagePlan(
            stage,
            tuple(hosts),
            tuple(tuple(b) for b in split_batches(hosts, rollout.batch_size)),
            shards[tuple(hosts)],
            _parallel(rollout, shards[tuple(hosts)], machines=len(workers) or 1),
        )
        for stage, hosts in runs
    )
    return Plan(
        cluster=cluster,
        options=options,
        rollout=rollout,
        targets=tuple(targets),
        stages=planned,
        files=render_files(cluster),
        etc_hosts=render_etc_hosts(cluster),
        exports=MappingProxyType(_exports(cluster, planned)),
        workers=MappingProxyType({name: cluster.node(name) for name in workers}),
        new_nodes=new_nodes,
    )


def _rollout(cluster: Cluster, options: PlanOptions) -> Rollout:
    spec = cluster.rollout
    parallel = options.max_parallel_shards
    return Rollout(
        batch_size=normalize_batch_size(options.batch_size or spec.batch_size),
        max_fail_percentage=spec.max_fail_percentage,
        forks=options.forks or spec.forks,
        max_parallel_shards=spec.max_parallel_shards if parallel is None else parallel,
        controller_memory_gib=spec.controller_memory_gib,
        worker_runner=spec.worker_runner,
        worker_transport=spec.worker_transport,
        receptor=spec.receptor,
    )


def _parallel(rollout: Rollout, shards: tuple[Shard, ...], *, machines: int) -> int:
    """How many of a stage's compute shards run at once (the controllers' runs alone first)."""
    return parallel_limit(
        rollout.max_parallel_shards,
        sum(1 for shard in shards if not shard.controllers),
        forks=rollout.forks,
        memory_gib=rollout.controller_memory_gib,
        machines=machines,
    )


def _switched_on(cluster: Cluster, chosen: tuple[Stage, ...] | None) -> list[Stage]:
    """The stages to run: `chosen`, or every available stage whose switch is on. A stage the
    operator named while the inventory has it off is an error, not a silent skip."""
    if chosen is None:
        return [s for s in available_stages() if _on(cluster, s) and _has_gpus(cluster, s)]
    off = [s.name for s in chosen if not _on(cluster, s)]
    if off:
        raise InvalidInputError(
            f"stage(s) off in this inventory: {', '.join(off)}",
            hint=f"turn it on: kiln_{off[0]}: {{enabled: true}} (group_vars/all.yml)",
        )
    idle = [s for s in chosen if not _has_gpus(cluster, s)]
    if idle:
        raise InvalidInputError(
            f"stage {idle[0].name}: no compute node of this inventory has "
            f"{idle[0].gpu_vendor} GPUs",
            hint="leave it out of --stages",
        )
    return list(chosen)


def _on(cluster: Cluster, stage: Stage) -> bool:
    return not stage.switch or bool(getattr(cluster, stage.switch).enabled)


def _has_gpus(cluster: Cluster, stage: Stage) -> bool:
    return not stage.gpu_vendor or any(
        node.has_gpus and node.profile.vendor == stage.gpu_vendor for node in cluster.compute
    )


def _targets(cluster: Cluster, options: PlanOptions, home: Path) -> list[str]:
    """The hosts kiln provisions (controllers and compute nodes; a bare kiln_workers host is
    not) that --limit and --retry-failed select."""
    managed = [node for node in cluster.nodes if node.is_controller or node.is_compute]
    if options.limit:
        check_patterns(options.limit, cluster.nodes, cluster.groups)
    targets = select_hosts(managed, options.limit)
    if options.limit and not targets:
        raise InvalidInputError(f"--limit {options.limit!r} selects no host of the inventory")
    if options.retry_failed:
        retry = set(retry_hosts(cluster.inventory_dir, home))
        targets = [host for host in targets if host in retry]
    return targets


def _stage_hosts(
    cluster: Cluster, options: PlanOptions, stages: list[Stage], targets: list[str], home: Path
) -> tuple[list[tuple[Stage, list[str]]], NewNodes | None]:
    """Which stage runs on which hosts. With --new-nodes: REFRESH (the cluster-wide files) on
    the controllers and the provisioned nodes, then every stage on the new nodes only."""
    if not options.new_nodes:
        runs = [(stage, stage_hosts(stage, cluster.groups, targets)) for stage in stages]
        skip = options.skip  # kiln.drift: the hosts where the stage is unchanged
        return [(s, [h for h in hosts if h not in skip.get(s.name, ())]) for s, hosts in runs], None
    done = (
        set(options.joined)
        if options.joined is not None
        else provisioned_hosts(cluster.inventory_dir, home)
    )
    new = [host for host in targets if host not in done]
    existing = [host for host in targets if host in done]
    refresh = [h for h in targets if cluster.node(h).is_controller or h in existing]
    runs: list[tuple[Stage, list[str]]] = []
    if new and refresh:
        runs.append((REFRESH, refresh))
    runs += [(stage, stage_hosts(stage, cluster.groups, new)) for stage in stages] if new else []
    return runs, NewNodes(tuple(new), tuple(existing), tuple(refresh if new else ()))


def _exports(cluster: Cluster, stages: tuple[StagePlan, ...]) -> dict[str, Export]:
    """The inventory exports: every node for the run; for each shard name, its hosts in every
    stage plus the controllers, in inventory order."""
    everyone = [node.name for node in cluster.nodes]
    members: dict[str, set[str]] = {}
    for stage in stages:
        for shard in stage.shards:
            members.setdefault(shard.name, set(always_included(cluster))).update(shard.hosts)
    exports = {RUN_INVENTORY: Export(RUN_INVENTORY, tuple(everyone), cluster)}
    for name, keep in members.items():
        exports[name] = Export(name, tuple(host for host in everyone if host in keep), cluster)
    return exports
