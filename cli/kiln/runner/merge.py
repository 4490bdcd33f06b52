"""Fold finished shards into one stage entry, and the rule that stops starting shards.

Pure functions over per-shard result documents: nothing here runs Ansible. StageMerge keeps
running counts as each shard finishes, so judging the stage after every shard costs the same
whatever the number of shards already finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.plan.stages import Stage
from kiln.records.status import BAD, UNFINISHED, HostStatus
from kiln.runner.engine import PlaybookResult
from kiln.runner.events import HostResult


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
    """A host of a shard that never started: not_run, every counter 0."""
    return HostResult(host).to_dict()


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


def stop_reason(
    merge: StageMerge, total: int, max_fail: int, *, controllers_done: bool
) -> tuple[str, bool] | None:
    """Why no further shard of the stage may start: (reason, crossed the failure threshold)."""
    entry = merge.trouble
    if entry is not None:
        if entry["status"] == "canceled":
            return "interrupted", False
        return (
            f"the play never reached its recap in shard {entry['name']} (ansible-runner "
            f"{entry['status']}, rc {entry['rc']}); see "
            f"{Path(entry['artifact_dir']) / 'stdout'}",
            False,
        )
    share = merge.failed_share(total)
    if crosses_threshold(share, max_fail):
        stopped = [e["name"] for e in merge.shard_entries if e["stopped_by_failure_threshold"]]
        where = f" (shards stopped inside: {', '.join(stopped)})" if stopped else ""
        batches = sum(e["batches"] for e in merge.shard_entries)
        expected = sum(e["expected_batches"] for e in merge.shard_entries)
        return (
            f"failures passed max_fail_percentage {max_fail}% ({share:.1f}% of the "
            f"stage's hosts) after batch {batches} of {expected}{where}; later batches and "
            "shards untouched",
            True,
        )
    if controllers_done and merge.shard_entries and bad_hosts(merge.shard_entries[0]):
        return "the controllers' shard failed; no compute shard was started", True
    return None


def stage_entry(stage: Stage, result: PlaybookResult, hosts: list[str], expected: int) -> dict:
    """One shard's run of a stage, as a stage entry."""
    host_results = {name: r.to_dict() for name, r in result.hosts.items()}
    untouched = [h for h, r in host_results.items() if r["status"] in UNFINISHED]
    stopped = bool(result.no_hosts_remaining and untouched and result.reached_recap)
    stats = result.stats or {}
    return {
        "name": stage.name,
        "playbook": str(stage.path()),
        "status": result.status,
        "rc": result.rc,
        "reached_recap": result.reached_recap,
        "batches": result.batches,
        "expected_batches": expected,
        "stopped_by_failure_threshold": stopped,
        "changed": sum((stats.get("changed") or {}).values()),
        "artifact_dir": str(result.artifact_dir),
        "hosts": host_results,
    }


def crashed_stage(stage: Stage, hosts: list[str], reason: str) -> dict[str, Any]:
    """The stage in flight when kiln itself failed: every host of it failed, with the reason,
    so the summary says failed and `--retry-failed` runs them again."""
    failed = {
        host: HostResult(host, status=HostStatus.FAILED, message=reason).to_dict() for host in hosts
    }
    return {**skipped_stage(stage, reason), "status": "error", "hosts": failed}


def skipped_stage(stage: Stage, reason: str) -> dict[str, Any]:
    return {
        "name": stage.name,
        "playbook": str(stage.path()),
        "status": "skipped",
        "reason": reason,
        "rc": None,
        "reached_recap": False,
        "batches": 0,
        "expected_batches": 0,
        "stopped_by_failure_threshold": False,
        "changed": 0,
        "hosts": {},
    }
