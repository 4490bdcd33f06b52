"""Provision: run the stages in order over a validated Cluster, under the inventory lock.

The core of `kiln provision`: no printing. It reports progress through a Listener and returns
the summary document it also writes to the run record.
"""

from __future__ import annotations

import os
import re
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kiln.errors import ExitCode, InvalidInputError
from kiln.inventory.export import export_inventory
from kiln.plan import batch_count as batch_size_for
from kiln.plan import render_etc_hosts, render_files
from kiln.plan.stages import REFRESH, Stage, stage_hosts
from kiln.records.lock import InventoryLock
from kiln.records.runs import (
    SUMMARY_SCHEMA_VERSION,
    RunRecord,
    new_run_id,
    now,
    provisioned_hosts,
    retry_hosts,
    state_dir,
)
from kiln.runner import engine, shards, workers
from kiln.runner.engine import DEFAULT_FORKS, PlaybookRequest, PlaybookResult
from kiln.runner.events import CappedLog, EventRecorder, ProgressAggregator, StageProgress
from kiln.runner.hostpattern import select_hosts

BATCH_SIZE = re.compile(r"^(?:[1-9][0-9]*|(?:[1-9][0-9]?|100)%)$")
STATUS_RANK = {"ok": 0, "changed": 1, "not_run": 2, "aborted": 3, "unreachable": 4, "failed": 5}
BAD_HOST_LISTS = ("failed_hosts", "unreachable_hosts", "incomplete_hosts")
FACTS_KEY = "kiln_preflight"  # set_stats key the preflight role saves its facts under


class Listener(Protocol):
    def stage_started(self, stage: Stage, hosts: list[str], batches: int) -> None: ...
    def progress(self, state: StageProgress) -> None: ...
    def stage_finished(self, stage: Stage, result: dict[str, Any]) -> None: ...


class _Quiet:
    def stage_started(self, stage: Stage, hosts: list[str], batches: int) -> None:
        pass

    def progress(self, state: StageProgress) -> None:
        pass

    def stage_finished(self, stage: Stage, result: dict[str, Any]) -> None:
        pass


@dataclass(slots=True)
class ProvisionOptions:
    stages: list[Stage]
    limit: str | None = None
    check: bool = False
    retry_failed: bool = False
    batch_size: str | None = None  # overrides the inventory's rollout batch size
    forks: int | None = None  # overrides kiln_rollout.forks
    extravars: dict[str, Any] = field(default_factory=dict)
    new_nodes: bool = False  # full stages on never-provisioned nodes; refresh the others
    shard_by: str | None = None  # overrides kiln_rollout.shard_by
    shard_size: int | None = None  # overrides kiln_rollout.shard_size
    max_parallel_shards: int | None = None  # overrides kiln_rollout.max_parallel_shards


def normalize_batch_size(value: object) -> str:
    text = str(value).strip().replace(" ", "")
    if not BATCH_SIZE.match(text):
        raise InvalidInputError(
            f"batch size {value!r} is neither a positive count nor a percentage (1%..100%)"
        )
    return text


def batch_count(hosts: int, batch_size: str) -> int:
    """How many batches Ansible's `serial` makes of `hosts` hosts."""
    size = batch_size_for(batch_size, hosts)
    return -(-hosts // size) if size else 0


def _managed(node: Any) -> bool:
    """A host kiln provisions: a controller or a compute node (a bare kiln_workers host is not)."""
    controller = getattr(node, "is_controller", None)
    compute = getattr(node, "is_compute", None)
    if controller is None and compute is None:
        return True
    return bool(controller or compute)


def select_targets(cluster: Any, options: ProvisionOptions, state: Path) -> list[str]:
    managed = [node for node in cluster.nodes if _managed(node)]
    targets = select_hosts(managed, options.limit)
    if options.limit and not targets:
        raise InvalidInputError(f"--limit {options.limit!r} selects no host of the inventory")
    if options.retry_failed:
        retry = set(retry_hosts(cluster.inventory_dir, state))
        targets = [host for host in targets if host in retry]
    return targets


def split_new_nodes(cluster: Any, targets: list[str], state: Path) -> tuple[list[str], list[str]]:
    """(new, existing): targets no earlier run provisioned fully, and the others."""
    done = provisioned_hosts(cluster.inventory_dir, state)
    new = [host for host in targets if host not in done]
    return new, [host for host in targets if host in done]


def stage_plan(
    cluster: Any, options: ProvisionOptions, targets: list[str], state: Path
) -> tuple[list[tuple[Stage, list[str]]], dict[str, Any] | None]:
    """Which stage runs on which hosts. With --new-nodes: REFRESH (the cluster-wide files) on
    the controllers and the provisioned nodes, then every stage on the new nodes only."""
    groups = getattr(cluster, "groups", None)

    def on(stage: Stage, hosts: list[str]) -> list[str]:
        return stage_hosts(stage, groups, hosts) if groups is not None else hosts

    if not options.new_nodes:
        return [(stage, on(stage, targets)) for stage in options.stages], None
    new, existing = split_new_nodes(cluster, targets, state)
    controllers = {n.name for n in cluster.nodes if getattr(n, "is_controller", False)}
    refresh = [h for h in targets if h in controllers or h in existing]
    plan: list[tuple[Stage, list[str]]] = []
    if new and refresh:
        plan.append((REFRESH, refresh))
    plan += [(stage, on(stage, new)) for stage in options.stages] if new else []
    return plan, {"new": new, "existing": existing, "refreshed": refresh if new else []}


def provision(
    cluster: Any,
    options: ProvisionOptions,
    *,
    listener: Listener | None = None,
    state: Path | None = None,
) -> dict[str, Any]:
    """Run `options.stages` over the cluster; returns the summary document (also on disk)."""
    listener = listener or _Quiet()
    state = state or state_dir()
    inventory = Path(cluster.inventory_dir).resolve()
    batch_size = normalize_batch_size(options.batch_size or cluster.rollout.batch_size)
    max_fail = int(cluster.rollout.max_fail_percentage)
    targets = select_targets(cluster, options, state)
    plan, new_nodes = stage_plan(cluster, options, targets, state)

    run_id = new_run_id()
    with InventoryLock(inventory, run_id=run_id, state=state) as lock:
        record = RunRecord.create(state, run_id)
        summary: dict[str, Any] = {
            "schema_version": SUMMARY_SCHEMA_VERSION,
            "run_id": record.run_id,
            "inventory": str(inventory),
            "cluster": cluster.name,
            "record": str(record.path),
            "check": options.check,
            "limit": options.limit,
            "retry_failed": options.retry_failed,
            "batch_size": batch_size,
            "max_fail_percentage": max_fail,
            "lock_id": lock.info.lock_id if lock.info else None,
            "cleared_stale_lock": lock.cleared_stale.lock_id if lock.cleared_stale else None,
            "started": now().isoformat(timespec="seconds"),
            "finished": None,
            "targets": targets,
            "stages": [],
            "stopped": None,
        }
        if new_nodes is not None:
            summary["new_nodes"] = new_nodes
        _prepare_inputs(cluster, record, options)
        run = _Run(cluster, options, record, summary, listener, batch_size, max_fail)
        try:
            with record.events_path.open("a", buffering=1) as stream:
                run.log = CappedLog(stream, _log_cap())
                try:
                    run.stages(plan)
                finally:
                    summary["events"] = run.log.close()
        finally:
            _finish(summary)
            record.write_summary(summary)
            if not options.check:
                record.mark_last(inventory)
    return summary


def _log_cap() -> int:
    return int(float(os.environ.get("KILN_EVENTS_MAX_MB", "64")) * 1024 * 1024)


def _prepare_inputs(cluster: Any, record: RunRecord, options: ProvisionOptions) -> None:
    """What every stage reads, made once per run from the validated model.

    The inventory Ansible sees is kiln's resolved view (defaults filled in); the cluster-wide
    files (slurm.conf, ...) are rendered once here, never by contacting every host.
    """
    export_inventory(cluster, record.path / "inventory")
    files_dir = record.path / "files"
    files_dir.mkdir(parents=True, exist_ok=True)
    for generated in render_files(cluster):
        (files_dir / generated.name).write_text(generated.content)
    etc_hosts = render_etc_hosts(cluster)
    (files_dir / etc_hosts.name).write_text(etc_hosts.content)
    options.extravars.setdefault("slurm_common_rendered_dir", str(files_dir))
    options.extravars.setdefault("base_hosts_file", str(files_dir / etc_hosts.name))


class _Run:
    """One provision run: stages in order, each split into shards run in parallel."""

    def __init__(self, cluster, options, record, summary, listener, batch_size, max_fail) -> None:
        self.cluster = cluster
        self.options = options
        self.record = record
        self.summary = summary
        self.listener = listener
        self.batch_size = batch_size
        self.max_fail = max_fail
        self.log: CappedLog | None = None
        rollout = cluster.rollout
        self.shard_by = options.shard_by or getattr(rollout, "shard_by", "rack_group")
        self.shard_size = options.shard_size or getattr(rollout, "shard_size", 512)
        configured = options.max_parallel_shards
        if configured is None:
            configured = getattr(rollout, "max_parallel_shards", 0)
        self.max_parallel = int(configured)
        self.memory_gib = float(getattr(rollout, "controller_memory_gib", 2.0))
        self.worker_runner = getattr(rollout, "worker_runner", "ansible-runner")
        self.forks = options.forks or getattr(rollout, "forks", DEFAULT_FORKS)
        self.workers = shards.worker_hosts(cluster)
        self.exports: dict[str, Path] = {}
        self.facts: dict[str, Any] = {}
        self.lock = threading.Lock()

    def stages(self, plan: list[tuple[Stage, list[str]]]) -> None:
        bad: set[str] = set()
        for index, (stage, wanted) in enumerate(plan):
            hosts = [host for host in wanted if host not in bad]
            if not hosts:
                self.summary["stages"].append(_skipped_stage(stage, "no host left to run on"))
                continue
            entry = self.stage(stage, hosts)
            self.summary["stages"].append(entry)
            self.listener.stage_finished(stage, entry)
            bad |= shards.held_back(entry)
            if self.summary["stopped"]:
                for later, _ in plan[index + 1 :]:
                    self.summary["stages"].append(_skipped_stage(later, "the rollout stopped"))
                return

    def stage(self, stage: Stage, hosts: list[str]) -> dict[str, Any]:
        planned = shards.plan_shards(
            self.cluster,
            hosts,
            shard_by=self.shard_by,
            shard_size=self.shard_size,
            workers=self.workers,
        )
        expected = sum(batch_count(len(s.hosts), self.batch_size) for s in planned)
        self.listener.stage_started(stage, hosts, expected)
        aggregate = ProgressAggregator(stage.name, len(planned), self.listener.progress)
        merge = shards.StageMerge(
            stage.name, str(stage.path()), hosts, directory=str(self.record.stage_dir(stage.name))
        )
        first = planned[:1] if planned and planned[0].controllers else []
        rest = planned[len(first) :]
        for shard in first:  # the controllers, alone, before any compute shard
            merge.add(self.shard(stage, shard, aggregate))
        stop = self._stop_reason(stage, merge, len(hosts), controllers_done=bool(first))
        if stop is None and rest:
            stop = self._parallel(stage, rest, aggregate, merge, len(hosts))
        elif stop is not None:
            merge.not_started += [s.to_dict() for s in rest]
        entry = merge.entry()
        if stop is not None:
            merge.stopped_overall = stop[1]
            entry = merge.entry()
            self.summary["stopped"] = {"stage": stage.name, "reason": stop[0]}
            if entry["shards_not_started"]:
                self.summary["stopped"]["shards_not_started"] = entry["shards_not_started"]
        if stage.name == "preflight" and self.facts:
            self.record.write_facts(self.facts)
        return entry

    def _parallel(self, stage, planned, aggregate, merge, total) -> tuple[str, bool] | None:
        limit = shards.parallel_limit(
            self.max_parallel,
            len(planned),
            forks=self.forks,
            memory_gib=self.memory_gib,
            machines=len(self.workers) or 1,
        )
        pending = list(planned)
        running: dict[Future, shards.Shard] = {}
        stop: tuple[str, bool] | None = None
        with ThreadPoolExecutor(max_workers=limit, thread_name_prefix="kiln-shard") as pool:
            while pending or running:
                while pending and len(running) < limit and stop is None:
                    shard = pending.pop(0)
                    running[pool.submit(self.shard, stage, shard, aggregate)] = shard
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    running.pop(future)
                    merge.add(future.result())
                if stop is None:
                    stop = self._stop_reason(stage, merge, total, controllers_done=False)
                if stop is not None and pending:
                    merge.not_started += [s.to_dict() for s in pending]
                    pending = []
        order = {s.name: i for i, s in enumerate(planned)}
        merge.shard_entries.sort(key=lambda e: (not e.get("controllers"), order.get(e["name"], -1)))
        return stop

    def _stop_reason(self, stage, merge, total, *, controllers_done) -> tuple[str, bool] | None:
        """Why no further shard may start: (reason, crossed the failure threshold).

        Reads the running counts StageMerge.add keeps, not every finished shard's hosts again.
        """
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
        if shards.crosses_threshold(share, self.max_fail):
            stopped = [e["name"] for e in merge.shard_entries if e["stopped_by_failure_threshold"]]
            where = f" (shards stopped inside: {', '.join(stopped)})" if stopped else ""
            batches = sum(e["batches"] for e in merge.shard_entries)
            expected = sum(e["expected_batches"] for e in merge.shard_entries)
            return (
                f"failures passed max_fail_percentage {self.max_fail}% ({share:.1f}% of the "
                f"stage's hosts) after batch {batches} of {expected}{where}; later batches and "
                "shards untouched",
                True,
            )
        if controllers_done and merge.shard_entries and shards.bad_hosts(merge.shard_entries[0]):
            return "the controllers' shard failed; no compute shard was started", True
        return None

    def export(self, shard: shards.Shard) -> Path:
        """The shard's inventory: its own hosts plus the controllers, written once per run."""
        with self.lock:
            path = self.exports.get(shard.name)
        if path is not None:
            return path
        members = list(shard.hosts)
        everyone = [n.name for n in self.cluster.nodes]
        keep = set(members) | set(shards.always_included(self.cluster))
        directory = self.record.path / "shards" / shard.name
        path = export_inventory(self.cluster, directory, [h for h in everyone if h in keep])
        with self.lock:
            self.exports[shard.name] = path
        return path

    def shard(self, stage: Stage, shard: shards.Shard, aggregate: ProgressAggregator) -> dict:
        started = now().isoformat(timespec="seconds")
        hosts = list(shard.hosts)
        directory = self.record.stage_dir(stage.name) / shard.name
        directory.mkdir(parents=True, exist_ok=True)
        limit_file = directory / "limit"
        limit_file.write_text("".join(f"{host}\n" for host in hosts))
        expected = batch_count(len(hosts), self.batch_size)
        recorder = EventRecorder(
            stage.name, log=self.log, progress=aggregate.callback(shard.name), shard=shard.name
        )
        request = PlaybookRequest(
            playbook=stage.path(),
            inventory=self.export(shard),
            private_data_dir=directory,
            ident=self.record.run_id,
            fact_cache=self.record.state / "fact_cache",
            limit=f"@{limit_file}",
            check=self.options.check,
            diff=self.options.check,
            forks=self.forks,
            extravars={
                **self.options.extravars,
                "kiln_batch_size": self.batch_size,
                "kiln_max_fail_percentage": self.max_fail,
                "kiln_run_id": self.record.run_id,
                "kiln_shard": shard.name,
            },
        )
        self._log_shard(stage, shard, "started")
        aggregate.shard_started(shard.name)
        try:
            result = self._execute(stage, shard, request, recorder, hosts)
        finally:
            aggregate.shard_finished(shard.name)
        entry = _stage_entry(stage, result, hosts, expected)
        entry.update(
            name=shard.name,
            worker=shard.worker,
            controllers=shard.controllers,
            started=started,
            finished=now().isoformat(timespec="seconds"),
        )
        if stage.name == "preflight" and FACTS_KEY in result.artifact_data:
            with self.lock:
                self.facts.update(result.artifact_data[FACTS_KEY])
        self._log_shard(stage, shard, entry["status"])
        return entry

    def _execute(self, stage, shard, request, recorder, hosts) -> PlaybookResult:
        if shard.worker is None:
            return engine.run_playbook(request, recorder, hosts)
        node = next(n for n in self.cluster.nodes if n.name == shard.worker)
        directory = workers.remote_dir(self.record.run_id, stage.name, shard.name)
        if self.worker_runner.startswith("/"):
            bin_dir = os.path.dirname(self.worker_runner)
            request.envvars["PATH"] = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        command = workers.worker_command(node, self.worker_runner, directory)
        return engine.run_playbook_streamed(request, recorder, hosts, command, directory)

    def _log_shard(self, stage: Stage, shard: shards.Shard, status: str) -> None:
        if self.log is not None:
            line = {"event": "kiln_shard", "stage": stage.name, "shard": shard.name}
            line.update(status=status, hosts=len(shard.hosts), worker=shard.worker)
            line["t"] = now().isoformat(timespec="seconds")
            self.log.write_event(line)


def _stage_entry(stage: Stage, result: PlaybookResult, hosts: list[str], expected: int) -> dict:
    host_results = {name: r.to_dict() for name, r in result.hosts.items()}
    untouched = [h for h, r in host_results.items() if r["status"] in ("not_run", "aborted")]
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


def _skipped_stage(stage: Stage, reason: str) -> dict[str, Any]:
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


def _finish(summary: dict[str, Any]) -> None:
    hosts: dict[str, dict[str, str]] = {}
    for entry in summary["stages"]:
        for name, result in entry["hosts"].items():
            hosts.setdefault(name, {})[entry["name"]] = result["status"]
    worst = {
        name: max(statuses.values(), key=STATUS_RANK.__getitem__)
        for name, statuses in hosts.items()
    }
    summary["hosts"] = hosts
    summary["failed_hosts"] = [h for h, s in worst.items() if s == "failed"]
    summary["unreachable_hosts"] = [h for h, s in worst.items() if s == "unreachable"]
    summary["incomplete_hosts"] = [h for h, s in worst.items() if s in ("aborted", "not_run")]
    summary["changed"] = sum(entry.get("changed", 0) for entry in summary["stages"])
    summary["rolled_out_batches"] = {e["name"]: e["batches"] for e in summary["stages"]}
    summary["stopped_by_failure_threshold"] = any(
        e["stopped_by_failure_threshold"] for e in summary["stages"]
    )
    summary["finished"] = now().isoformat(timespec="seconds")
    stopped = summary.get("stopped") or {}
    if stopped.get("reason") == "interrupted":
        code = ExitCode.INTERRUPTED
    elif stopped or any(summary[key] for key in BAD_HOST_LISTS):
        code = ExitCode.FAILED
    else:
        code = ExitCode.OK
    summary["exit_code"] = int(code)
