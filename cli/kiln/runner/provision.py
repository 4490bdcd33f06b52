"""Provision: run the stages in order over a validated Cluster, under the inventory lock.

The core of `kiln provision`: no printing. It reports progress through a Listener and returns
the summary document it also writes to the run record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kiln.errors import ExitCode, InvalidInputError
from kiln.inventory.export import export_inventory
from kiln.planning import render_files
from kiln.runner.engine import DEFAULT_FORKS, PlaybookRequest, PlaybookResult, run_playbook
from kiln.runner.events import EventRecorder, StageProgress
from kiln.runner.hostpattern import select_hosts
from kiln.runner.lock import InventoryLock
from kiln.runner.records import (
    SUMMARY_SCHEMA_VERSION,
    RunRecord,
    new_run_id,
    now,
    retry_hosts,
    state_dir,
)
from kiln.runner.stages import Stage

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
    forks: int = DEFAULT_FORKS
    extravars: dict[str, Any] = field(default_factory=dict)


def normalize_batch_size(value: object) -> str:
    text = str(value).strip().replace(" ", "")
    if not BATCH_SIZE.match(text):
        raise InvalidInputError(
            f"batch size {value!r} is neither a positive count nor a percentage (1%..100%)"
        )
    return text


def batch_count(hosts: int, batch_size: str) -> int:
    """How many batches Ansible's `serial` makes of `hosts` hosts."""
    if hosts == 0:
        return 0
    if batch_size.endswith("%"):
        size = max(1, int(hosts * int(batch_size[:-1]) / 100))
    else:
        size = int(batch_size)
    return -(-hosts // size)


def select_targets(cluster: Any, options: ProvisionOptions, state: Path) -> list[str]:
    targets = select_hosts(cluster.nodes, options.limit)
    if options.limit and not targets:
        raise InvalidInputError(f"--limit {options.limit!r} selects no host of the inventory")
    if options.retry_failed:
        retry = set(retry_hosts(cluster.inventory_dir, state))
        targets = [host for host in targets if host in retry]
    return targets


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
        _prepare_inputs(cluster, record, options)
        try:
            with record.events_path.open("a", buffering=1) as log:
                _run_stages(cluster, options, record, summary, log, listener, batch_size, max_fail)
        finally:
            _finish(summary)
            record.write_summary(summary)
            if not options.check:
                record.mark_last(inventory)
    return summary


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
    options.extravars.setdefault("slurm_common_rendered_dir", str(files_dir))


def _run_stages(cluster, options, record, summary, log, listener, batch_size, max_fail) -> None:
    bad: set[str] = set()
    all_nodes = [node.name for node in cluster.nodes]
    for stage in options.stages:
        hosts = [host for host in summary["targets"] if host not in bad]
        if not hosts:
            summary["stages"].append(_skipped_stage(stage, "no host left to run on"))
            continue
        stage_dir = record.stage_dir(stage.name)
        limit = None
        if hosts != all_nodes:
            limit_file = stage_dir / "limit"
            limit_file.write_text("".join(f"{host}\n" for host in hosts))
            limit = f"@{limit_file}"
        expected = batch_count(len(hosts), batch_size)
        listener.stage_started(stage, hosts, expected)
        recorder = EventRecorder(stage.name, log=log, progress=listener.progress)
        request = PlaybookRequest(
            playbook=stage.path(),
            inventory=record.path / "inventory",
            private_data_dir=stage_dir,
            ident=record.run_id,
            fact_cache=record.state / "fact_cache",
            limit=limit,
            check=options.check,
            diff=options.check,
            forks=options.forks,
            extravars={
                **options.extravars,
                "kiln_batch_size": batch_size,
                "kiln_max_fail_percentage": max_fail,
                "kiln_run_id": record.run_id,
            },
        )
        result = run_playbook(request, recorder, hosts)
        entry = _stage_entry(stage, result, hosts, expected)
        summary["stages"].append(entry)
        if stage.name == "preflight" and FACTS_KEY in result.artifact_data:
            record.write_facts(result.artifact_data[FACTS_KEY])
        listener.stage_finished(stage, entry)
        bad |= {h for h, r in entry["hosts"].items() if r["status"] in ("failed", "unreachable")}
        if result.status == "canceled":
            summary["stopped"] = {"stage": stage.name, "reason": "interrupted"}
        elif not result.reached_recap:
            summary["stopped"] = {
                "stage": stage.name,
                "reason": f"the play never reached its recap (ansible-runner {result.status}, "
                f"rc {result.rc}); see {result.artifact_dir / 'stdout'}",
            }
        elif entry["stopped_by_failure_threshold"]:
            summary["stopped"] = {
                "stage": stage.name,
                "reason": f"failures passed max_fail_percentage {max_fail}% after batch "
                f"{result.batches} of {expected}; later batches untouched",
            }
        if summary["stopped"]:
            for later in options.stages[options.stages.index(stage) + 1 :]:
                summary["stages"].append(_skipped_stage(later, "the rollout stopped"))
            return


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
