"""Turn ansible-runner events into compact records, live progress and per-host results.

The recorder is ansible-runner's event handler: it only records and returns fast. It returns
False so ansible-runner writes no job_events/*.json file (about 4 KB an event); the compact line
it appends to events.jsonl is the event log kept in the run record.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import IO, Any

from kiln.records.status import BAD, GOOD, HostStatus, worse
from kiln.runner.manifest import Managed, managed_action

# A task's result on a host, by its event: ok, failed or unreachable (HostStatus), or skipped.
SKIPPED = "skipped"
HOST_EVENTS = {
    "runner_on_ok": HostStatus.OK,
    "runner_on_failed": HostStatus.FAILED,
    "runner_on_unreachable": HostStatus.UNREACHABLE,
    "runner_on_skipped": SKIPPED,
    "runner_on_async_ok": HostStatus.OK,
    "runner_on_async_failed": HostStatus.FAILED,
}
# Stats keys from the awx_display callback (playbook_on_stats) -> HostResult counters: Ansible's
# recap counters (some named like a HostStatus, counts all the same).
STATS_KEYS = {
    "ok": "ok",
    "changed": "changed",
    "failures": "failed",
    "dark": "unreachable",
    "skipped": "skipped",
    "rescued": "rescued",
    "ignored": "ignored",
}
MSG_LIMIT = 2000
# What a progress display counts each host under: the worst it has reached so far.
LIVE = (HostStatus.OK, HostStatus.CHANGED, HostStatus.FAILED, HostStatus.UNREACHABLE)


@dataclass(slots=True)
class HostResult:
    """One host in one stage. `status` is the verdict; the counters come from the recap."""

    host: str
    status: str = HostStatus.NOT_RUN  # a HostStatus
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0
    batch: int | None = None
    failed_task: str | None = None
    message: str | None = None

    @property
    def bad(self) -> bool:
        """Failed or unreachable."""
        return self.status in BAD

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, host: str, data: Mapping[str, Any]) -> HostResult:
        """A host's result as a summary holds it (keys this kiln does not know left out)."""
        known = {item.name for item in fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in known}, "host": host})


@dataclass(slots=True)
class StageProgress:
    """What a progress display needs: per-status host counts and the task in flight."""

    stage: str
    task: str | None = None
    batch: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LIVE, 0))
    last_host: str | None = None
    last_status: str | None = None
    last_message: str | None = None
    shards: int = 1
    shards_done: int = 0
    shards_running: int = 0


ProgressCallback = Callable[[StageProgress], None]
# Lines kept once the log is over its cap: what a post-mortem needs.
KEPT_WHEN_CAPPED = {
    "runner_on_failed",
    "runner_on_unreachable",
    "runner_on_async_failed",
    "playbook_on_play_start",
    "playbook_on_no_hosts_remaining",
    "playbook_on_stats",
    "kiln_shard",
}
DEFAULT_LOG_CAP = 64 * 1024 * 1024


class CappedLog:
    """The run's events.jsonl, shared by the shards running at once: one lock, a byte cap.

    Under the cap every compact line is kept; over it only failures, plays, recaps and shard
    lines are, and the number of lines dropped is counted (and written as the last line), so
    12,500 hosts x hundreds of tasks cannot fill the disk. Per-host results live in summary.json.
    """

    def __init__(self, stream: IO[str], cap_bytes: int = DEFAULT_LOG_CAP) -> None:
        self.stream = stream
        self.cap = cap_bytes
        self.bytes = 0
        self.lines = 0
        self.dropped = 0
        self._lock = threading.Lock()

    def write_event(self, line: dict[str, Any]) -> None:
        text = json.dumps(line, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if self.bytes + len(text) > self.cap and line.get("event") not in KEPT_WHEN_CAPPED:
                self.dropped += 1
                return
            self.stream.write(text)
            self.bytes += len(text)
            self.lines += 1

    def write(self, text: str) -> None:  # a plain text stream's interface, for old callers
        with self._lock:
            self.stream.write(text)
            self.bytes += len(text)

    def close(self) -> dict[str, int]:
        with self._lock:
            if self.dropped:
                note = {"event": "kiln_log_capped", "dropped": self.dropped, "cap": self.cap}
                self.stream.write(json.dumps(note, separators=(",", ":")) + "\n")
            return {"lines": self.lines, "bytes": self.bytes, "dropped": self.dropped}


class ProgressAggregator:
    """Folds the StageProgress of the shards of one stage into one, for one display.

    Shards report from their own threads; the aggregate is updated and handed on under a lock.
    Each report costs the same whatever the number of shards: the totals move by the reporting
    shard's change since its previous report (no walk over every shard per event).
    """

    def __init__(self, stage: str, shards: int, progress: ProgressCallback | None) -> None:
        self.progress_now = StageProgress(stage, shards=shards)
        self.progress = progress
        self.per_shard: dict[str, dict[str, int]] = {}  # each shard's counts at its last report
        self._lock = threading.Lock()

    def shard_started(self, shard: str) -> None:
        with self._lock:
            self.progress_now.shards_running += 1
            self._emit()

    def shard_finished(self, shard: str) -> None:
        with self._lock:
            self.progress_now.shards_running -= 1
            self.progress_now.shards_done += 1

    def callback(self, shard: str) -> ProgressCallback:
        def report(state: StageProgress) -> None:
            with self._lock:
                total = self.progress_now
                before = self.per_shard.get(shard, {})
                for key, value in state.counts.items():
                    change = value - before.get(key, 0)
                    if change:
                        total.counts[key] = total.counts.get(key, 0) + change
                self.per_shard[shard] = dict(state.counts)
                total.task, total.batch = state.task, max(total.batch, state.batch)
                total.last_host, total.last_status = state.last_host, state.last_status
                total.last_message = state.last_message
                self._emit()
                state.last_message = None

        return report

    def _emit(self) -> None:
        if self.progress is not None:
            self.progress(self.progress_now)


def failure_message(res: Any) -> str | None:
    """The message of a failed or unreachable task result, however the module shaped it."""
    if not isinstance(res, dict):
        return None
    for item in res.get("results") or ():
        if isinstance(item, dict) and item.get("failed"):
            message = failure_message(item)
            if message:
                return message
    parts = [str(res[key]).strip() for key in ("msg", "stderr", "module_stderr") if res.get(key)]
    if not parts and res.get("rc") not in (None, 0):
        parts.append(f"exit status {res['rc']}")
    text = parts[0] if parts else None
    if text and len(text) > MSG_LIMIT:
        text = text[:MSG_LIMIT] + "..."
    return text


class EventRecorder:
    """ansible-runner event handler for one stage: records, feeds progress, never blocks."""

    def __init__(
        self,
        stage: str,
        log: IO[str] | CappedLog | None = None,
        progress: ProgressCallback | None = None,
        shard: str | None = None,
        redact: Callable[[Any], Any] | None = None,
    ) -> None:
        self.stage = stage
        self.shard = shard
        # kiln.inventory.redact, bound to the run's secrets: every line and message goes
        # through it before it is kept, logged or shown.
        self.redact = redact
        self.log = log
        self.progress = progress
        self.progress_now = StageProgress(stage)
        self.hosts: dict[str, HostResult] = {}
        self.live: dict[str, str] = {}
        self.stats: dict[str, dict[str, int]] | None = None
        self.artifact_data: dict[str, Any] = {}
        self.batches = 0
        self.no_hosts_remaining = False
        self.events = 0
        self.error: str | None = None  # the first exception the handler caught, if any
        self.managed: dict[str, Managed] = {}  # host -> files, packages, services it manages

    def _host(self, name: str) -> HostResult:
        result = self.hosts.get(name)
        if result is None:
            result = self.hosts[name] = HostResult(name, batch=self.batches or None)
        return result

    def __call__(self, event: dict[str, Any]) -> bool:
        """ansible-runner calls this from the loop that watches the play: an exception here
        would leave ansible-playbook running unwatched. It is caught and kept; the caller fails
        the shard (kiln.runner.execute) once the play is over."""
        try:
            return self._record(event)
        except Exception as error:  # kept; the shard fails on it
            if self.error is None:
                self.error = f"{type(error).__name__}: {error}"
            return False

    def _record(self, event: dict[str, Any]) -> bool:
        self.events += 1
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        record: dict[str, Any] | None = None
        if kind == "playbook_on_play_start":
            self.batches += 1
            self.progress_now.batch = self.batches
            record = {"play": data.get("play"), "batch": self.batches}
        elif kind == "playbook_on_task_start":
            self.progress_now.task = data.get("task")
            record = {"task": self.progress_now.task}
        elif kind in HOST_EVENTS:
            record = self._host_event(kind, data)
        elif kind == "playbook_on_no_hosts_remaining":
            self.no_hosts_remaining = True
            record = {}
        elif kind == "playbook_on_stats":
            self.stats = {key: dict(data.get(key) or {}) for key in STATS_KEYS if key in data} or {
                "ok": {}
            }
            self.artifact_data = dict(data.get("artifact_data") or {})
            record = {"stats": self.stats}
        if record is not None and self.log is not None:
            line = {"stage": self.stage, "n": event.get("counter"), "event": kind, **record}
            if self.shard is not None:
                line["shard"] = self.shard
            line["t"] = event.get("created")
            if self.redact is not None:
                line = self.redact(line)
            if isinstance(self.log, CappedLog):
                self.log.write_event(line)
            else:
                self.log.write(json.dumps(line, separators=(",", ":"), default=str) + "\n")
        if record is not None and self.progress is not None and kind != "playbook_on_stats":
            self.progress(self.progress_now)
        return False  # ansible-runner writes no per-event JSON file

    def _host_event(self, kind: str, data: dict[str, Any]) -> dict[str, Any] | None:
        host = data.get("host")
        if not host:
            return None
        status = HOST_EVENTS[kind]
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        ignored = bool(data.get("ignore_errors")) and status == HostStatus.FAILED
        result = self._host(host)
        changed = bool(res.get("changed"))
        record: dict[str, Any] = {"host": host, "task": data.get("task")}
        if changed:
            record["changed"] = True
        if status in BAD and not ignored:
            result.failed_task = data.get("task")
            result.message = failure_message(res)
            if self.redact is not None and result.message:
                result.message = self.redact(result.message)
            record["msg"] = result.message
            live = status
        else:
            if ignored:
                record["ignored"] = True
            elif status == HostStatus.OK and managed_action(
                action := data.get("resolved_action") or data.get("task_action")
            ):
                self.managed.setdefault(host, Managed()).add(action, res)
            live = HostStatus.CHANGED if changed else HostStatus.OK
        self._count(host, live)
        self.progress_now.last_host, self.progress_now.last_status = host, status
        self.progress_now.last_message = result.message if status in BAD else None
        return record

    def _count(self, host: str, status: str) -> None:
        """Count each host once, under the worst status it has reached so far."""
        previous = self.live.get(host)
        if previous is not None and not worse(status, previous):
            return
        if previous is not None:
            self.progress_now.counts[previous] -= 1
        self.progress_now.counts[status] += 1
        self.live[host] = status

    def host_results(self, targets: list[str], *, stopped: bool) -> dict[str, HostResult]:
        """Per-host results from the recap; hosts the play never reached are `not_run`.

        When the rollout stopped early, hosts of the last batch that neither failed nor were
        unreachable did not finish the stage: they are `aborted`.
        """
        results: dict[str, HostResult] = {}
        stats = self.stats or {}
        seen = set(targets)
        names = list(targets) + sorted({h for counters in stats.values() for h in counters} - seen)
        for name in names:
            result = self.hosts.get(name) or HostResult(name)
            for key, attribute in STATS_KEYS.items():
                setattr(result, attribute, int((stats.get(key) or {}).get(name, 0)))
            result.status = _verdict(result, in_recap=any(name in c for c in stats.values()))
            if self.stats is None and name in self.hosts:
                # No recap: judge from the events alone.
                result.status = HostStatus.FAILED if result.failed_task else HostStatus.ABORTED
            if stopped and result.status in GOOD and result.batch == self.batches:
                result.status = HostStatus.ABORTED
            results[name] = result
        return results


def _verdict(result: HostResult, *, in_recap: bool) -> HostStatus:
    if result.unreachable:
        return HostStatus.UNREACHABLE
    if result.failed:
        return HostStatus.FAILED
    if not in_recap:
        return HostStatus.NOT_RUN
    return HostStatus.CHANGED if result.changed else HostStatus.OK
