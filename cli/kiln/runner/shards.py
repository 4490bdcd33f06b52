"""Split a rollout into shards, decide when to stop starting them, and merge their results.

Pure functions over the Cluster model and per-shard result documents: nothing here runs Ansible.
A shard is one ansible-runner process with only its own hosts (plus the controllers) in its
inventory, so Ansible's per-host-task cost, which grows with the inventory, stays bounded by the
shard size instead of the fleet size. Controllers run first, alone; compute shards then run in
parallel (kiln.runner.provision), locally or on `kiln_workers` hosts (kiln.runner.workers).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

CONTROLLERS_SHARD = "controllers"
WORKERS_GROUP = "kiln_workers"
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
BAD = ("failed", "unreachable")
UNFINISHED = ("not_run", "aborted")
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

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "hosts": list(self.hosts), "worker": self.worker}


def _safe(text: str) -> str:
    return UNSAFE.sub("_", text).strip("_") or "shard"


def _is_controller(node: Any) -> bool:
    return bool(getattr(node, "is_controller", "kiln_controllers" in node.groups))


def plan_shards(
    cluster: Any,
    hosts: list[str],
    *,
    shard_by: str = "rack_group",
    shard_size: int = 512,
    workers: tuple[str, ...] | list[str] = (),
) -> list[Shard]:
    """The shards of `hosts`, in run order: the controllers alone, then the others by
    `shard_by`: whole racks packed into shards of at most `shard_size` hosts (`rack_group`; a
    rack larger than that is a shard of its own), one shard per rack (`rack`), or `shard_size`
    hosts at a time in inventory order (`count`).

    Compute shards are spread round-robin over `workers` when there are any; the controllers'
    shard always runs on this controller (the run record and the lock live here).
    """
    by_name = {node.name: node for node in cluster.nodes}
    controllers = [h for h in hosts if _is_controller(by_name[h])]
    rest = [h for h in hosts if not _is_controller(by_name[h])]
    shards: list[Shard] = []
    if controllers:
        shards.append(Shard(CONTROLLERS_SHARD, tuple(controllers), controllers=True))
    groups: list[tuple[str, list[str]]] = []
    if shard_by == "count":
        size = max(1, int(shard_size))
        width = max(3, len(str(-(-len(rest) // size))))
        for index in range(0, len(rest), size):
            groups.append((f"part-{index // size + 1:0{width}d}", rest[index : index + size]))
    else:
        racks: dict[str, list[str]] = {}
        for host in rest:
            racks.setdefault(str(getattr(by_name[host], "rack", "unracked")), []).append(host)
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
        shards.append(Shard(name, tuple(members), worker=worker))
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


def worker_hosts(cluster: Any) -> tuple[str, ...]:
    """The hosts of the `kiln_workers` group (worker controllers), in inventory order."""
    return tuple(getattr(cluster, "groups", {}).get(WORKERS_GROUP, ()))


def always_included(cluster: Any) -> list[str]:
    """Hosts every shard's inventory carries: the controllers (plays delegate to them and read
    their hostvars)."""
    return [node.name for node in cluster.nodes if _is_controller(node)]


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


def bad_hosts(entry: dict[str, Any]) -> int:
    """Hosts of one finished shard that failed or were unreachable."""
    return sum(1 for result in entry["hosts"].values() if result["status"] in BAD)


def failed_share(bad: int, total_hosts: int) -> float:
    """`bad` hosts as a percentage of the stage's hosts."""
    return 100.0 * bad / total_hosts if total_hosts > 0 else 0.0


def crosses_threshold(share: float, max_fail: int) -> bool:
    """Ansible's rule (failed share > max_fail_percentage), over the whole stage."""
    return share > max_fail


def held_back(entry: dict[str, Any]) -> set[str]:
    """Hosts a later stage must not run on: bad ones, and unfinished ones of a stopped shard."""
    stopped = entry.get("stopped_by_failure_threshold") or not entry.get("reached_recap", True)
    return {
        host
        for host, result in entry["hosts"].items()
        if result["status"] in BAD or (stopped and result["status"] in UNFINISHED)
    }


@dataclass(slots=True)
class StageMerge:
    """Per-shard entries folded into one stage entry with the keys an unsharded stage has."""

    name: str
    playbook: str
    hosts: list[str]
    shard_entries: list[dict[str, Any]] = field(default_factory=list)
    not_started: list[dict[str, Any]] = field(default_factory=list)
    stopped_overall: bool = False
    directory: str | None = None
    bad: int = 0  # failed or unreachable hosts of the finished shards
    trouble: dict[str, Any] | None = None  # the first finished shard canceled or short of its recap

    def add(self, entry: dict[str, Any]) -> None:
        """One finished shard. Costs its own hosts only, so judging the stage after every shard
        costs the same per shard whatever the number of shards already finished."""
        self.shard_entries.append(entry)
        self.bad += bad_hosts(entry)
        if self.trouble is None and (entry["status"] == "canceled" or not entry["reached_recap"]):
            self.trouble = entry

    def failed_share(self, total_hosts: int) -> float:
        """failed_share() of the finished shards, from the running count."""
        return failed_share(self.bad, total_hosts)

    def entry(self) -> dict[str, Any]:
        shards = self.shard_entries
        statuses = [s["status"] for s in shards]
        if "canceled" in statuses:
            status = "canceled"
        elif statuses and all(s == "successful" for s in statuses) and not self.not_started:
            status = "successful"
        elif not statuses:
            status = "skipped"
        else:
            status = "failed"
        merged: dict[str, dict[str, Any]] = {}
        for shard in shards:
            merged.update(shard["hosts"])
        for shard in self.not_started:
            for host in shard["hosts"]:
                merged.setdefault(host, _not_run(host))
        hosts = {h: merged[h] for h in self.hosts if h in merged}
        hosts.update({h: r for h, r in merged.items() if h not in hosts})
        rcs = [s["rc"] for s in shards if s["rc"] not in (None, 0)]
        artifact = shards[0]["artifact_dir"] if len(shards) == 1 else self.directory
        return {
            "name": self.name,
            "playbook": self.playbook,
            "status": status,
            "rc": (rcs[0] if rcs else (0 if shards else None)),
            "reached_recap": bool(shards) and all(s["reached_recap"] for s in shards),
            "batches": sum(s["batches"] for s in shards),
            "expected_batches": sum(s["expected_batches"] for s in shards),
            "stopped_by_failure_threshold": self.stopped_overall
            or any(s["stopped_by_failure_threshold"] for s in shards),
            "changed": sum(s["changed"] for s in shards),
            "artifact_dir": artifact,
            "hosts": hosts,
            "shards": [_shard_view(s) for s in shards]
            + [{**s, "status": "not_started"} for s in self.not_started],
            "shards_not_started": [s["name"] for s in self.not_started],
        }


def _not_run(host: str) -> dict[str, Any]:
    return {
        "host": host,
        "status": "not_run",
        "ok": 0,
        "changed": 0,
        "failed": 0,
        "unreachable": 0,
        "skipped": 0,
        "rescued": 0,
        "ignored": 0,
        "batch": None,
        "failed_task": None,
        "message": None,
    }


def _shard_view(entry: dict[str, Any]) -> dict[str, Any]:
    """A shard in the summary: its own verdict and counts; per-host results sit on the stage."""
    counts: dict[str, int] = {}
    for result in entry["hosts"].values():
        counts[result["status"]] = counts.get(result["status"], 0) + 1
    keep = (
        "name",
        "worker",
        "status",
        "rc",
        "reached_recap",
        "batches",
        "expected_batches",
        "stopped_by_failure_threshold",
        "changed",
        "artifact_dir",
        "started",
        "finished",
    )
    view = {key: entry.get(key) for key in keep}
    view["hosts"] = list(entry["hosts"])
    view["counts"] = counts
    return view
