"""RunResult: what one execution of a Plan did, per stage and per host.

The same document is `kiln provision --json` and the run record's summary.json. Its stages are
kiln.runner.outcome's StageOutcome (hosts, shards, batches, status), documents only in to_dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kiln.errors import ExitCode
from kiln.records.runs import SUMMARY_SCHEMA_VERSION
from kiln.records.status import UNFINISHED, HostStatus, worst
from kiln.runner.outcome import StageOutcome


@dataclass(slots=True)
class RunResult:
    run_id: str
    inventory: str
    cluster: str
    record: str
    check: bool
    limit: str | None
    retry_failed: bool
    batch_size: str
    max_fail_percentage: int
    lock_id: str | None
    cleared_stale_lock: str | None
    started: str
    targets: list[str]
    new_nodes: dict[str, list[str]] | None = None
    finished: str | None = None
    stages: list[StageOutcome] = field(default_factory=list)
    stopped: dict[str, Any] | None = None
    events: dict[str, Any] | None = None  # the event log's size and what the cap dropped
    hosts: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> stage -> status
    failed_hosts: list[str] = field(default_factory=list)
    unreachable_hosts: list[str] = field(default_factory=list)
    incomplete_hosts: list[str] = field(default_factory=list)
    changed: int = 0
    stopped_by_failure_threshold: bool = False
    exit_code: int = int(ExitCode.OK)
    # Drift-aware re-apply: stage -> hosts skipped as unchanged (kiln.drift), and what each
    # stage manages on each host it ran on (kiln.runner.manifest; not in the summary).
    unchanged: dict[str, list[str]] = field(default_factory=dict)
    managed: dict[str, dict[str, dict[str, list[str]]]] = field(default_factory=dict)
    # host -> why the slurm stage drained it until burn-in passes ("new node", "hardware
    # changed: gpu_serials"): the role's kiln_quarantined statistic, read by the lifecycle
    quarantined: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK

    def finish(self, finished: str) -> None:
        """Fold the stages into the per-host verdicts and the exit code."""
        for stage in self.stages:
            for name, result in stage.hosts.items():
                self.hosts.setdefault(name, {})[stage.name] = result.status
        verdicts = {name: worst(statuses.values()) for name, statuses in self.hosts.items()}
        self.failed_hosts = [h for h, s in verdicts.items() if s == HostStatus.FAILED]
        self.unreachable_hosts = [h for h, s in verdicts.items() if s == HostStatus.UNREACHABLE]
        self.incomplete_hosts = [h for h, s in verdicts.items() if s in UNFINISHED]
        self.changed = sum(stage.changed for stage in self.stages)
        self.stopped_by_failure_threshold = any(
            stage.stopped_by_failure_threshold for stage in self.stages
        )
        self.finished = finished
        bad = self.failed_hosts or self.unreachable_hosts or self.incomplete_hosts
        if (self.stopped or {}).get("reason") == "interrupted":
            self.exit_code = int(ExitCode.INTERRUPTED)
        elif self.stopped or bad:
            self.exit_code = int(ExitCode.FAILED)
        else:
            self.exit_code = int(ExitCode.OK)

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "schema_version": SUMMARY_SCHEMA_VERSION,
            "run_id": self.run_id,
            "inventory": self.inventory,
            "cluster": self.cluster,
            "record": self.record,
            "check": self.check,
            "limit": self.limit,
            "retry_failed": self.retry_failed,
            "batch_size": self.batch_size,
            "max_fail_percentage": self.max_fail_percentage,
            "lock_id": self.lock_id,
            "cleared_stale_lock": self.cleared_stale_lock,
            "started": self.started,
            "finished": self.finished,
            "targets": self.targets,
            "stages": [stage.to_dict() for stage in self.stages],
            "stopped": self.stopped,
        }
        if self.new_nodes is not None:
            document["new_nodes"] = self.new_nodes
        if self.unchanged:
            document["unchanged"] = self.unchanged
        if self.quarantined:
            document["quarantined"] = dict(sorted(self.quarantined.items()))
        document.update(
            events=self.events,
            hosts=self.hosts,
            failed_hosts=self.failed_hosts,
            unreachable_hosts=self.unreachable_hosts,
            incomplete_hosts=self.incomplete_hosts,
            changed=self.changed,
            rolled_out_batches={stage.name: stage.batches for stage in self.stages},
            stopped_by_failure_threshold=self.stopped_by_failure_threshold,
            exit_code=self.exit_code,
        )
        return document
