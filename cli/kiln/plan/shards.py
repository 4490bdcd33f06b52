"""Split a stage's hosts into shards and size how many run at once.

Pure functions over the Cluster model: nothing here runs Ansible. A shard is one ansible-runner
process with only its own hosts (plus the controllers) in its inventory, so Ansible's per-host-task
cost, which grows with the inventory, stays bounded by the shard size instead of the fleet size.
Controllers run first, alone; compute shards then run in parallel (kiln.runner), locally or on
`kiln_workers` hosts (kiln.runner.workers).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

from kiln.inventory import Cluster
from kiln.inventory.batches import batches_needed

CONTROLLERS_SHARD = "controllers"
WORKERS_GROUP = "kiln_workers"
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# One running shard of 512 hosts with every fork busy, rounded up from bench/scale_cost.py
# --busy (2026-11-30: 84-87 MiB for ansible-playbook, 12-14 MiB a busy fork; docs/scale.md),
# and what kiln's own process keeps for itself at 12,500 hosts (about 100 MiB measured).
SHARD_MAIN_MIB = 90
SHARD_FORK_MIB = 15
KILN_OWN_MIB = 128


@dataclass(frozen=True, slots=True)
class Shard:
    """One slice of the fleet: the hosts one ansible-runner process is limited to."""

    name: str
    hosts: tuple[str, ...]
    controllers: bool = False
    worker: str | None = None  # a kiln_workers host that runs it; None: this controller
    batches: int = 0  # the rolling batches Ansible's `serial` makes of its hosts

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "hosts": list(self.hosts), "worker": self.worker}


def narrowed(shard: Shard, keep: Collection[str], batch_size: str) -> Shard:
    """`shard` on the hosts in `keep` only, with the batches `serial` makes of those."""
    hosts = tuple(host for host in shard.hosts if host in keep)
    return replace(shard, hosts=hosts, batches=batches_needed(len(hosts), batch_size))


def _safe(text: str) -> str:
    return UNSAFE.sub("_", text).strip("_") or "shard"


def plan_shards(
    cluster: Cluster,
    hosts: list[str],
    *,
    shard_by: str = "rack_group",
    shard_size: int = 512,
    workers: tuple[str, ...] | list[str] = (),
    batch_size: str = "100%",
) -> list[Shard]:
    """The shards of `hosts`, in run order: the controllers alone, then the others by
    `shard_by`: whole racks packed into shards of at most `shard_size` hosts (`rack_group`; a
    rack larger than that is a shard of its own), one shard per rack (`rack`), or `shard_size`
    hosts at a time in inventory order (`count`).

    Compute shards are spread round-robin over `workers` when there are any; the controllers'
    shard always runs on this controller (the run record and the lock live here). Each shard
    counts the batches `batch_size` makes of its hosts (the default: Ansible's, all at once).
    """
    nodes = [cluster.node(h) for h in hosts]  # looked up once: 12,500 hosts a stage
    controllers = [node.name for node in nodes if node.is_controller]
    rest = [node for node in nodes if not node.is_controller]
    shards: list[Shard] = []
    if controllers:
        batches = batches_needed(len(controllers), batch_size)
        shards.append(
            Shard(CONTROLLERS_SHARD, tuple(controllers), controllers=True, batches=batches)
        )
    groups: list[tuple[str, list[str]]] = []
    if shard_by == "count":
        size = max(1, int(shard_size))
        width = max(3, len(str(-(-len(rest) // size))))
        names = [node.name for node in rest]
        for index in range(0, len(rest), size):
            groups.append((f"part-{index // size + 1:0{width}d}", names[index : index + size]))
    else:
        racks: dict[str, list[str]] = {}
        for node in rest:
            racks.setdefault(node.rack, []).append(node.name)
        packed = (
            _pack_racks(racks, max(1, int(shard_size)))
            if shard_by == "rack_group"
            else [[rack] for rack in racks]
        )
        used: set[str] = set()
        for names in packed:
            name = f"rack-{_safe(names[0])}"
            if len(names) > 1:
                name = f"racks-{_safe(names[0])}-{_safe(names[-1])}"
            while name in used:  # two rack names that sanitise alike
                name += "_"
            used.add(name)
            groups.append((name, [host for rack in names for host in racks[rack]]))
    for index, (name, members) in enumerate(groups):
        worker = workers[index % len(workers)] if workers else None
        batches = batches_needed(len(members), batch_size)
        shards.append(Shard(name, tuple(members), worker=worker, batches=batches))
    return shards


def _pack_racks(racks: dict[str, list[str]], size: int) -> list[list[str]]:
    """Consecutive racks (inventory order) packed into groups of at most `size` hosts."""
    groups: list[list[str]] = []
    hosts = 0
    for rack, members in racks.items():
        if groups and hosts + len(members) <= size:
            groups[-1].append(rack)
            hosts += len(members)
        else:
            groups.append([rack])
            hosts = len(members)
    return groups


def worker_hosts(cluster: Cluster) -> tuple[str, ...]:
    """The hosts of the `kiln_workers` group (worker controllers), in inventory order."""
    return tuple(cluster.groups.get(WORKERS_GROUP, ()))


def always_included(cluster: Cluster) -> list[str]:
    """Hosts every shard's inventory carries: the controllers (plays delegate to them and read
    their hostvars)."""
    return [node.name for node in cluster.controllers]


def shard_memory_mib(forks: int) -> float:
    """Estimated memory of one running shard with every fork busy: its ansible-playbook plus
    its forked workers (bench/scale_cost.py --busy measures both; docs/scale.md)."""
    return SHARD_MAIN_MIB + forks * SHARD_FORK_MIB


def parallel_limit(
    configured: int,
    shards: int,
    cpu_count: int | None = None,
    *,
    forks: int = 25,
    memory_gib: float | None = None,
    machines: int = 1,
) -> int:
    """How many shards run at once: the configured number; else, on each of `machines` (this
    controller, or each worker controller), as many as fit `memory_gib` beside kiln's own
    process when it is given, at most one per CPU core of this controller."""
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    wanted = configured
    if configured <= 0:
        per_machine = cores
        if memory_gib is not None:
            room = memory_gib * 1024 - KILN_OWN_MIB
            per_machine = min(cores, int(room // shard_memory_mib(forks)))
        wanted = max(1, per_machine) * max(1, machines)
    return max(1, min(wanted, max(shards, 1)))
