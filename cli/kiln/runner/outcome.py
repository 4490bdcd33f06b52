"""What a stage and each of its shards did: typed in memory, a dict only in the run record.

The runner, the provision room and the commands read these objects; `to_dict` writes the
documents summary.json and `kiln provision --json` have always held (same keys, same order), and
`from_dict` reads such a document back, so records written before these types still read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kiln.plan.shards import CONTROLLERS_SHARD, Shard
from kiln.runner.events import HostResult

NOT_STARTED = "not_started"  # a shard's status when the rollout stopped before it
ERROR = "error"  # a stage's status when kiln itself failed while it ran


@dataclass(slots=True)
class ShardOutcome:
    """One shard's run of a stage. In the summary it shows its own verdict, counts and host
    names; the hosts' results sit on the stage."""

    name: str
    status: str  # ansible-runner's (successful, failed, canceled, ...) or NOT_STARTED
    hosts: dict[str, HostResult]
    worker: str | None = None
    controllers: bool = False
    rc: int | None = None
    reached_recap: bool = False
    batches: int = 0
    expected_batches: int = 0
    stopped_by_failure_threshold: bool = False
    changed: int = 0
    artifact_dir: str | None = None
    started: str | None = None
    finished: str | None = None
    requeued_from: list[str] = field(default_factory=list)  # workers lost while running it

    @classmethod
    def not_started(cls, shard: Shard) -> ShardOutcome:
        """A shard the rollout stopped before: every host of it not run."""
        hosts = {host: HostResult(host) for host in shard.hosts}
        return cls(shard.name, NOT_STARTED, hosts, worker=shard.worker)

    @property
    def ran(self) -> bool:
        return self.status != NOT_STARTED

    def bad_hosts(self) -> int:
        """Its hosts that failed or were unreachable."""
        return sum(1 for result in self.hosts.values() if result.bad)

    def to_dict(self) -> dict[str, Any]:
        if not self.ran:
            hosts = list(self.hosts)
            return {"name": self.name, "hosts": hosts, "worker": self.worker, "status": self.status}
        counts: dict[str, int] = {}
        for result in self.hosts.values():
            counts[result.status] = counts.get(result.status, 0) + 1
        return {
            "name": self.name,
            "worker": self.worker,
            "status": self.status,
            "rc": self.rc,
            "reached_recap": self.reached_recap,
            "batches": self.batches,
            "expected_batches": self.expected_batches,
            "stopped_by_failure_threshold": self.stopped_by_failure_threshold,
            "changed": self.changed,
            "artifact_dir": self.artifact_dir,
            "started": self.started,
            "finished": self.finished,
            "hosts": list(self.hosts),
            "counts": counts,
        } | ({"requeued_from": list(self.requeued_from)} if self.requeued_from else {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], hosts: Mapping[str, HostResult]) -> ShardOutcome:
        """A shard from its summary view; `hosts`: the stage's results, where its hosts' are."""
        mine = {host: hosts.get(host) or HostResult(host) for host in data.get("hosts", ())}
        if data.get("status") == NOT_STARTED:
            return cls(data["name"], NOT_STARTED, mine, worker=data.get("worker"))
        return cls(
            name=data["name"],
            status=data["status"],
            hosts=mine,
            worker=data.get("worker"),
            controllers=data["name"] == CONTROLLERS_SHARD,  # not in the summary: its name says
            rc=data.get("rc"),
            reached_recap=bool(data.get("reached_recap", False)),
            batches=int(data.get("batches", 0)),
            expected_batches=int(data.get("expected_batches", 0)),
            stopped_by_failure_threshold=bool(data.get("stopped_by_failure_threshold", False)),
            changed=int(data.get("changed", 0)),
            artifact_dir=data.get("artifact_dir"),
            started=data.get("started"),
            finished=data.get("finished"),
            requeued_from=list(data.get("requeued_from") or ()),
        )


@dataclass(slots=True)
class StageOutcome:
    """One stage of a run: its verdict, counts and every host's result.

    `shards` is None for a stage that never ran as planned (skipped, or failed by kiln's own
    error, each with its `reason`); its summary then has no artifact_dir nor shard list."""

    name: str
    playbook: str
    status: str  # successful, failed, canceled, skipped, ERROR
    hosts: dict[str, HostResult] = field(default_factory=dict)
    rc: int | None = None
    reached_recap: bool = False
    batches: int = 0
    expected_batches: int = 0
    stopped_by_failure_threshold: bool = False
    changed: int = 0
    reason: str | None = None
    artifact_dir: str | None = None
    shards: list[ShardOutcome] | None = None
    # What the stage cost where it ran: wall seconds, and CPU seconds of this controller (kiln
    # and the ansible-playbook processes it ran; a worker controller's are its own). The
    # measured figures `kiln plan --estimate` projects from; None in an older record.
    seconds: float | None = None
    controller_cpu_s: float | None = None

    @property
    def shards_not_started(self) -> list[str]:
        return [shard.name for shard in self.shards or () if not shard.ran]

    def statuses(self) -> dict[str, str]:
        """host -> its status in this stage."""
        return {host: result.status for host, result in self.hosts.items()}

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "name": self.name,
            "playbook": self.playbook,
            "status": self.status,
        }
        if self.reason is not None:
            document["reason"] = self.reason
        document.update(
            rc=self.rc,
            reached_recap=self.reached_recap,
            batches=self.batches,
            expected_batches=self.expected_batches,
            stopped_by_failure_threshold=self.stopped_by_failure_threshold,
            changed=self.changed,
        )
        if self.seconds is not None:
            document.update(seconds=self.seconds, controller_cpu_s=self.controller_cpu_s)
        if self.shards is not None:
            document["artifact_dir"] = self.artifact_dir
        document["hosts"] = {host: result.to_dict() for host, result in self.hosts.items()}
        if self.shards is not None:
            document["shards"] = [shard.to_dict() for shard in self.shards]
            document["shards_not_started"] = self.shards_not_started
        return document

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StageOutcome:
        """A stage from a summary's entry (this or an earlier kiln's)."""
        hosts = {host: HostResult.from_dict(host, r) for host, r in data.get("hosts", {}).items()}
        shards = data.get("shards")
        return cls(
            name=data["name"],
            playbook=data.get("playbook", ""),
            status=data["status"],
            hosts=hosts,
            rc=data.get("rc"),
            reached_recap=bool(data.get("reached_recap", False)),
            batches=int(data.get("batches", 0)),
            expected_batches=int(data.get("expected_batches", 0)),
            stopped_by_failure_threshold=bool(data.get("stopped_by_failure_threshold", False)),
            changed=int(data.get("changed", 0)),
            reason=data.get("reason"),
            artifact_dir=data.get("artifact_dir"),
            shards=None if shards is None else [ShardOutcome.from_dict(s, hosts) for s in shards],
            seconds=data.get("seconds"),
            controller_cpu_s=data.get("controller_cpu_s"),
        )
