"""Execute a Plan: its stages in order, each split into its shards, under the lock it is handed.

The core of `kiln provision`: no printing, no planning, no rendering. It writes what the Plan
carries into the run record, reports progress through a Listener and returns a RunResult (also
written to the record as summary.json).
"""

from __future__ import annotations

import os
import resource
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Protocol

from kiln.errors import KilnError
from kiln.inventory.vault import VaultConfig, active
from kiln.plan import Plan, StagePlan
from kiln.plan.model import RUN_INVENTORY
from kiln.plan.shards import Shard
from kiln.plan.stages import Stage
from kiln.records.runs import RunRecord, ensure_writable, new_run_id, now, runs_home, unwritable
from kiln.runner import engine, merge, workers
from kiln.runner.engine import PlaybookRequest
from kiln.runner.events import CappedLog, EventRecorder, ProgressAggregator, StageProgress
from kiln.runner.hold import Hold, StopCheck
from kiln.runner.outcome import ShardOutcome, StageOutcome
from kiln.runner.pool import Ran, WorkerPool
from kiln.runner.private import RunSecrets
from kiln.runner.result import RunResult


def controller_cpu_seconds() -> float:
    """CPU seconds this process and its finished children (every ansible-playbook a stage ran,
    with its forks) have used on this machine."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


FACTS_KEY = "kiln_preflight"  # set_stats key the preflight role saves its facts under
QUARANTINED_KEY = "kiln_quarantined"  # ... and the slurm_node role the nodes it quarantined


class Listener(Protocol):
    def stage_started(self, stage: Stage, hosts: list[str], batches: int) -> None: ...
    def progress(self, update: StageProgress) -> None: ...
    def stage_finished(self, stage: Stage, result: StageOutcome) -> None: ...


class _Quiet:
    def stage_started(self, stage: Stage, hosts: list[str], batches: int) -> None:
        pass

    def progress(self, update: StageProgress) -> None:
        pass

    def stage_finished(self, stage: Stage, result: StageOutcome) -> None:
        pass


def execute(
    plan: Plan,
    *,
    lock: Hold,
    listener: Listener | None = None,
    home: Path | None = None,
    run_id: str | None = None,
    vault: VaultConfig | None = None,
) -> RunResult:
    """Run the plan's stages; returns the result (also on disk as the record's summary).

    `lock`: the lock the caller holds for this run (kiln.state.SharedState; a test or a bench
    may hand the local kiln.records.lock.InventoryLock), asked before each stage and shard
    (kiln.runner.hold). The runner takes no lock of its own: whoever starts a run holds the
    cluster's lock first, so no run can start without it."""
    listener = listener or _Quiet()
    home = home or runs_home()
    secrets = RunSecrets.for_plan(
        plan, vault if vault is not None else active()
    )  # no secret in the record (kiln.runner.private)
    run_id = run_id or new_run_id()
    ensure_writable(home)
    inventory = plan.inventory_dir
    with secrets:
        record = RunRecord.create(home, run_id)
        result = RunResult(
            run_id=record.run_id,
            inventory=str(inventory),
            cluster=plan.cluster.name,
            record=str(record.path),
            check=plan.options.check,
            limit=plan.options.limit,
            retry_failed=plan.options.retry_failed,
            batch_size=plan.rollout.batch_size,
            max_fail_percentage=plan.rollout.max_fail_percentage,
            lock_id=lock.info.lock_id if lock.info else None,
            cleared_stale_lock=lock.cleared_stale.lock_id if lock.cleared_stale else None,
            started=now().isoformat(timespec="seconds"),
            targets=list(plan.targets),
            new_nodes=plan.new_nodes.to_dict() if plan.new_nodes else None,
            unchanged={k: sorted(v) for k, v in plan.options.skip.items() if v},
        )
        try:
            run = _Run(plan, record, result, listener, secrets, StopCheck(lock))
            with record.events_path.open("a", buffering=1) as stream:
                run.log = run.pool.log = CappedLog(stream, _log_cap())
                try:
                    run.stages()
                finally:
                    result.events = run.log.close()
        except BaseException as error:
            # Whatever went wrong (a bug, a full disk, ^C), the summary must say the run failed
            # and name the hosts it left unfinished, so `--retry-failed` runs them again.
            _crashed(plan, record, result, error)
            if isinstance(error, OSError) and str(error.filename).startswith(str(home)):
                raise unwritable(error) from error  # a full or read-only runs home: exit 3
            if not isinstance(error, Exception) or isinstance(error, KilnError):
                raise  # ^C and kiln's own errors keep their exit code and message
        finally:
            result.finish(now().isoformat(timespec="seconds"))
            record.write_summary(secrets.redact(result.to_dict()))
            if not plan.options.check:
                record.mark_last(inventory)
    return result


class KilnCrash(RuntimeError):
    """The event handler caught an exception while a shard ran: the shard's record is not
    trusted, so the run fails like any other exception during it."""


def _crashed(plan: Plan, record: RunRecord, result: RunResult, error: BaseException) -> None:
    """Fold an exception into the result: the stage in flight (or the first not yet run) has
    every host failed with the reason, later stages are skipped, the run is stopped."""
    interrupted = isinstance(error, KeyboardInterrupt)
    reason = "interrupted" if interrupted else f"kiln error: {type(error).__name__}: {error}"
    if not interrupted:
        try:
            (record.path / "error.txt").write_text("".join(traceback.format_exception(error)))
            reason += f" (traceback in {record.path / 'error.txt'})"
        except OSError:
            pass
    done = {outcome.name for outcome in result.stages}
    failed = {h for outcome in result.stages for h, r in outcome.hosts.items() if r.bad}
    stopped_in = None
    for planned in plan.stages:
        if planned.stage.name in done:
            continue
        if stopped_in is None:  # the stage in flight, or the first one not yet run
            stopped_in = planned.stage.name
            hosts = [host for host in planned.hosts if host not in failed]
            result.stages.append(merge.crashed_stage(planned.stage, hosts, reason))
        else:
            result.stages.append(merge.skipped_stage(planned.stage, "the run stopped on an error"))
    result.stopped = {"stage": stopped_in or "-", "reason": reason}


def _log_cap() -> int:
    return int(float(os.environ.get("KILN_EVENTS_MAX_MB", "64")) * 1024 * 1024)


def _write_inputs(plan: Plan, record: RunRecord, secrets: RunSecrets) -> dict[str, str]:
    """What every stage reads, written once per run from the plan: the run's inventory export
    and the cluster-wide files. Returns the extravars that point the roles at them."""
    text = plan.exports[RUN_INVENTORY].text  # the record keeps it redacted: no stage reads it
    secrets.write_inventory(text, record.path / "inventory" / "hosts.json", RUN_INVENTORY)
    files_dir = record.path / "files"
    files_dir.mkdir(parents=True, exist_ok=True)
    for generated in (*plan.files, plan.etc_hosts):
        (files_dir / generated.name).write_text(generated.content)
    return {
        "slurm_common_rendered_dir": str(files_dir),
        "base_hosts_file": str(files_dir / plan.etc_hosts.name),
    }


class _Run:
    """One execution: stages in order, each split into shards run in parallel."""

    def __init__(
        self,
        plan: Plan,
        record: RunRecord,
        result: RunResult,
        listener: Listener,
        secrets: RunSecrets | None = None,
        hold: StopCheck | None = None,
    ) -> None:
        self.secrets = secrets or RunSecrets(set(), None)
        self.hold = hold or StopCheck(None)
        self.plan = plan
        self.rollout = plan.rollout
        self.record = record
        self.result = result
        self.listener = listener
        self.log: CappedLog | None = None
        self.extravars = {**_write_inputs(plan, record, self.secrets), **plan.options.extravars}
        self.exports: dict[str, Path] = {}
        self.facts: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.pool = WorkerPool(plan.workers, workers.transport(self.rollout), record.run_id)

    def stages(self) -> None:
        bad: set[str] = set()
        stages = self.plan.stages
        for index, planned in enumerate(stages):
            stage = planned.stage
            hosts = [host for host in planned.hosts if host not in bad]
            if not hosts:
                why = "no host left to run on"
                if not planned.hosts and self.plan.options.skip.get(stage.name):
                    why = "unchanged on every host (drift probe)"
                self.result.stages.append(merge.skipped_stage(stage, why))
                continue
            if (lost := self.hold.why()) is not None:  # never start a stage without the lock
                self.result.stopped = {"stage": stage.name, "reason": lost}
                for later in stages[index:]:
                    self.result.stages.append(merge.skipped_stage(later.stage, "lock lost"))
                return
            outcome = self.stage(planned, hosts)
            self.result.stages.append(outcome)
            self.listener.stage_finished(stage, outcome)
            bad |= merge.held_back(outcome)
            if self.result.stopped:
                for later in stages[index + 1 :]:
                    self.result.stages.append(
                        merge.skipped_stage(later.stage, "the rollout stopped")
                    )
                return

    def stage(self, planned: StagePlan, hosts: list[str]) -> StageOutcome:
        start, cpu = time.monotonic(), controller_cpu_seconds()
        outcome = self._stage(planned, hosts)
        outcome.seconds = round(time.monotonic() - start, 3)
        outcome.controller_cpu_s = round(controller_cpu_seconds() - cpu, 3)
        return outcome

    def _stage(self, planned: StagePlan, hosts: list[str]) -> StageOutcome:
        stage = planned.stage
        shards = list(self.plan.shards_left(planned, hosts))
        self.listener.stage_started(stage, hosts, sum(shard.batches for shard in shards))
        aggregate = ProgressAggregator(stage.name, len(shards), self.listener.progress)
        folded = merge.StageMerge(
            stage.name, str(stage.path()), hosts, directory=str(self.record.stage_dir(stage.name))
        )
        first = shards[:1] if shards and shards[0].controllers else []
        rest = shards[len(first) :]
        for shard in first:  # the controllers, alone, before any compute shard
            folded.add(self.shard(stage, shard, aggregate))
        stop = self._stop_reason(folded, len(hosts), controllers_done=bool(first))
        if stop is None and rest:
            stop = self._parallel(planned, rest, aggregate, folded, len(hosts))
        elif stop is not None:
            folded.not_started += rest
        if stop is not None:
            folded.stopped_overall = stop[1]
        outcome = folded.entry()
        if stop is not None:
            self.result.stopped = {"stage": stage.name, "reason": stop[0]}
            if outcome.shards_not_started:
                self.result.stopped["shards_not_started"] = outcome.shards_not_started
        if stage.name == "preflight" and self.facts:
            self.record.write_facts(self.facts)
        return outcome

    def _parallel(self, planned, shards, aggregate, folded, total) -> tuple[str, bool] | None:
        stage = planned.stage
        limit = min(planned.parallel, len(shards))  # the plan sized it; held-back hosts shrink it
        pending = list(shards)
        running: dict[Future, Shard] = {}
        stop: tuple[str, bool] | None = None
        with ThreadPoolExecutor(max_workers=limit, thread_name_prefix="kiln-shard") as pool:
            while pending or running:
                while pending and len(running) < limit and stop is None:
                    if (lost := self.hold.why()) is not None:  # nor a shard
                        stop = (lost, False)
                        break
                    shard = pending.pop(0)
                    running[pool.submit(self.shard, stage, shard, aggregate)] = shard
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    running.pop(future)
                    folded.add(future.result())
                if stop is None:
                    stop = self._stop_reason(folded, total, controllers_done=False)
                if stop is not None and pending:
                    folded.not_started += pending
                    pending = []
        order = {s.name: i for i, s in enumerate(shards)}
        folded.shard_entries.sort(key=lambda s: (not s.controllers, order.get(s.name, -1)))
        return stop

    def _stop_reason(self, folded, total, *, controllers_done) -> tuple[str, bool] | None:
        """Why no further shard may start: (reason, crossed the failure threshold).

        Reads the running counts StageMerge.add keeps, not every finished shard's hosts again.
        """
        return merge.stop_reason(
            folded, total, self.rollout.max_fail_percentage, controllers_done=controllers_done
        )

    def export(self, shard: Shard) -> Path:
        """The shard's inventory (its hosts in every stage plus the controllers), written once
        per run."""
        with self.lock:
            path = self.exports.get(shard.name)
        if path is not None:
            return path
        copy = self.record.path / "shards" / shard.name / "hosts.json"
        text = self.plan.exports[shard.name].text
        path = self.secrets.write_inventory(text, copy, f"shard-{shard.name}")
        with self.lock:
            self.exports[shard.name] = path
        return path

    def shard(self, stage: Stage, shard: Shard, aggregate: ProgressAggregator) -> ShardOutcome:
        started = now().isoformat(timespec="seconds")
        hosts = list(shard.hosts)
        directory = self.record.stage_dir(stage.name) / shard.name
        directory.mkdir(parents=True, exist_ok=True)
        limit_file = directory / "limit"
        limit_file.write_text("".join(f"{host}\n" for host in hosts))

        def new_recorder() -> EventRecorder:  # one per attempt: a lost worker's is set aside
            progress, redact = aggregate.callback(shard.name), self.secrets.redact
            return EventRecorder(
                stage.name, log=self.log, progress=progress, shard=shard.name, redact=redact
            )

        request = PlaybookRequest(
            playbook=stage.path(),
            inventory=self.export(shard),
            private_data_dir=directory,
            ident=self.record.run_id,
            fact_cache=self.record.home / "fact_cache",
            limit=f"@{limit_file}",
            check=self.plan.options.check,
            diff=self.plan.options.check,
            forks=self.rollout.forks,
            extravars={
                **self.extravars,
                "kiln_batch_size": self.rollout.batch_size,
                "kiln_max_fail_percentage": self.rollout.max_fail_percentage,
                "kiln_disruption_budget": self.plan.disruption_budget(stage.name),
                "kiln_run_id": self.record.run_id,
                "kiln_shard": shard.name,
            },
            envvars=self.secrets.env(),
        )
        self._log_shard(stage, shard, "started", shard.worker and self.pool.standing(shard.worker))
        aggregate.shard_started(shard.name)
        try:
            ran = self._execute(stage.name, shard, request, new_recorder)
        finally:
            aggregate.shard_finished(shard.name)
        result, recorder = ran.result, ran.recorder
        if recorder.error is not None:
            raise KilnCrash(f"recording the events of shard {shard.name}: {recorder.error}")
        with self.lock:  # what the stage manages per host: kiln.drift records it on the node
            found = self.result.managed.setdefault(stage.name, {})
            found.update({host: m.to_dict() for host, m in recorder.managed.items()})
        finished = now().isoformat(timespec="seconds")
        outcome = merge.shard_outcome(shard, result, started, finished)
        outcome.worker, outcome.requeued_from = ran.worker, ran.lost
        if stage.name == "preflight" and FACTS_KEY in result.artifact_data:
            with self.lock:
                self.facts.update(result.artifact_data[FACTS_KEY])
        quarantined = result.artifact_data.get(QUARANTINED_KEY)
        if isinstance(quarantined, dict):
            with self.lock:
                self.result.quarantined.update({str(h): str(w) for h, w in quarantined.items()})
        self._log_shard(stage, shard, outcome.status, ran.worker)  # where it ran, lost or not
        return outcome

    def _execute(
        self,
        stage: str,
        shard: Shard,
        request: PlaybookRequest,
        new_recorder: Callable[[], EventRecorder],
    ) -> Ran:
        if shard.worker is None:
            recorder = new_recorder()
            return Ran(engine.run_playbook(request, recorder, list(shard.hosts)), recorder, None)
        return self.pool.run(shard, stage, request, new_recorder)

    def _log_shard(self, stage: Stage, shard: Shard, status: str, worker: str | None) -> None:
        if self.log is not None:
            line = {"event": "kiln_shard", "stage": stage.name, "shard": shard.name}
            line.update(status=status, hosts=len(shard.hosts), worker=worker)
            line["t"] = now().isoformat(timespec="seconds")
            self.log.write_event(line)
