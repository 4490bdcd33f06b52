"""Fold finished shards into one stage outcome, and the rule that stops starting shards.

Pure functions over shard and stage outcomes (kiln.runner.outcome): nothing here runs Ansible.
StageMerge keeps running counts as each shard finishes, so judging the stage after every shard
costs the same whatever the number of shards already finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kiln.plan.shards import Shard
from kiln.plan.stages import Stage
from kiln.records.status import UNFINISHED, HostStatus
from kiln.runner.engine import PlaybookResult
from kiln.runner.events import HostResult
from kiln.runner.outcome import ERROR, ShardOutcome, StageOutcome

CANCELED = "canceled"  # ansible-runner's status of a process it was told to stop


def bad_hosts(shard: ShardOutcome) -> int:
    """Hosts of one finished shard that failed or were unreachable."""
    return shard.bad_hosts()


def failed_share(bad: int, total_hosts: int) -> float:
    """`bad` hosts as a percentage of the stage's hosts."""
    return 100.0 * bad / total_hosts if total_hosts > 0 else 0.0


def crosses_threshold(share: float, max_fail: int) -> bool:
    """Ansible's rule (failed share > max_fail_percentage), over the whole stage."""
    return share > max_fail


def held_back(outcome: StageOutcome | ShardOutcome) -> set[str]:
    """Hosts a later stage must not run on: bad ones, and unfinished ones of a stopped shard."""
    stopped = outcome.stopped_by_failure_threshold or not outcome.reached_recap
    return {
        host
        for host, result in outcome.hosts.items()
        if result.bad or (stopped and result.status in UNFINISHED)
    }


@dataclass(slots=True)
class StageMerge:
    """Shard outcomes folded into one stage outcome with the fields an unsharded stage has."""

    name: str
    playbook: str
    hosts: list[str]
    shard_entries: list[ShardOutcome] = field(default_factory=list)
    not_started: list[Shard] = field(default_factory=list)
    stopped_overall: bool = False
    directory: str | None = None
    bad: int = 0  # failed or unreachable hosts of the finished shards
    trouble: ShardOutcome | None = None  # the first finished shard canceled or short of its recap

    def add(self, shard: ShardOutcome) -> None:
        """One finished shard. Costs its own hosts only, so judging the stage after every shard
        costs the same per shard whatever the number of shards already finished."""
        self.shard_entries.append(shard)
        self.bad += shard.bad_hosts()
        if self.trouble is None and (shard.status == CANCELED or not shard.reached_recap):
            self.trouble = shard

    def failed_share(self, total_hosts: int) -> float:
        """failed_share() of the finished shards, from the running count."""
        return failed_share(self.bad, total_hosts)

    def entry(self) -> StageOutcome:
        shards = self.shard_entries
        statuses = [s.status for s in shards]
        if CANCELED in statuses:
            status = CANCELED
        elif statuses and all(s == "successful" for s in statuses) and not self.not_started:
            status = "successful"
        elif not statuses:
            status = "skipped"
        else:
            status = "failed"
        unstarted = [ShardOutcome.not_started(shard) for shard in self.not_started]
        merged: dict[str, HostResult] = {}
        for shard in shards:
            merged.update(shard.hosts)
        for shard in unstarted:
            for host, result in shard.hosts.items():
                merged.setdefault(host, result)
        hosts = {h: merged[h] for h in self.hosts if h in merged}
        hosts.update({h: r for h, r in merged.items() if h not in hosts})
        rcs = [s.rc for s in shards if s.rc not in (None, 0)]
        return StageOutcome(
            name=self.name,
            playbook=self.playbook,
            status=status,
            hosts=hosts,
            rc=rcs[0] if rcs else (0 if shards else None),
            reached_recap=bool(shards) and all(s.reached_recap for s in shards),
            batches=sum(s.batches for s in shards),
            expected_batches=sum(s.expected_batches for s in shards),
            stopped_by_failure_threshold=self.stopped_overall
            or any(s.stopped_by_failure_threshold for s in shards),
            changed=sum(s.changed for s in shards),
            artifact_dir=shards[0].artifact_dir if len(shards) == 1 else self.directory,
            shards=[*shards, *unstarted],
        )


def stop_reason(
    merge: StageMerge, total: int, max_fail: int, *, controllers_done: bool
) -> tuple[str, bool] | None:
    """Why no further shard of the stage may start: (reason, crossed the failure threshold)."""
    shard = merge.trouble
    if shard is not None:
        if shard.status == CANCELED:
            return "interrupted", False
        return (
            f"the play never reached its recap in shard {shard.name} (ansible-runner "
            f"{shard.status}, rc {shard.rc}); see {Path(shard.artifact_dir or '.') / 'stdout'}",
            False,
        )
    share = merge.failed_share(total)
    if crosses_threshold(share, max_fail):
        stopped = [s.name for s in merge.shard_entries if s.stopped_by_failure_threshold]
        where = f" (shards stopped inside: {', '.join(stopped)})" if stopped else ""
        batches = sum(s.batches for s in merge.shard_entries)
        expected = sum(s.expected_batches for s in merge.shard_entries)
        return (
            f"failures passed max_fail_percentage {max_fail}% ({share:.1f}% of the "
            f"stage's hosts) after batch {batches} of {expected}{where}; later batches and "
            "shards untouched",
            True,
        )
    if controllers_done and merge.shard_entries and merge.shard_entries[0].bad_hosts():
        return "the controllers' shard failed; no compute shard was started", True
    return None


def shard_outcome(
    shard: Shard, result: PlaybookResult, started: str, finished: str
) -> ShardOutcome:
    """One shard's run of a stage."""
    untouched = [h for h, r in result.hosts.items() if r.status in UNFINISHED]
    stats = result.stats or {}
    return ShardOutcome(
        name=shard.name,
        status=result.status,
        hosts=dict(result.hosts),
        worker=shard.worker,
        controllers=shard.controllers,
        rc=result.rc,
        reached_recap=result.reached_recap,
        batches=result.batches,
        expected_batches=shard.batches,
        stopped_by_failure_threshold=bool(
            result.no_hosts_remaining and untouched and result.reached_recap
        ),
        changed=sum((stats.get("changed") or {}).values()),
        artifact_dir=str(result.artifact_dir),
        started=started,
        finished=finished,
    )


def crashed_stage(stage: Stage, hosts: list[str], reason: str) -> StageOutcome:
    """The stage in flight when kiln itself failed: every host of it failed, with the reason,
    so the summary says failed and `--retry-failed` runs them again."""
    crashed = skipped_stage(stage, reason)
    crashed.status = ERROR
    crashed.hosts = {
        host: HostResult(host, status=HostStatus.FAILED, message=reason) for host in hosts
    }
    return crashed


def skipped_stage(stage: Stage, reason: str) -> StageOutcome:
    return StageOutcome(stage.name, str(stage.path()), "skipped", reason=reason)
