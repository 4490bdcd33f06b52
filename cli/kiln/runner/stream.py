"""Streaming: a playbook run on a worker controller. Transmit here, `ansible-runner worker`
there (under kiln.runner.worker_side's lease), process here into the same EventRecorder, so a
worker shard's results come home as if it ran on this machine.

ansible_runner is still imported by kiln.runner.engine alone; this module calls it there.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from kiln.runner import engine, worker_side
from kiln.runner.engine import (
    LOCAL_ONLY,
    STRATEGY_DIR,
    PlaybookRequest,
    PlaybookResult,
    batch_workers,
    runner_kwargs,
)
from kiln.runner.events import EventRecorder


def _ship(source: Path, pdd: Path, name: str) -> Path:
    """Copy a file or directory into the private data dir (what transmit sends)."""
    target = pdd / name
    if source.is_dir():
        shutil.copytree(
            source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return target


def streamed_kwargs(request: PlaybookRequest, remote_dir: str) -> dict[str, Any]:
    """The arguments transmitted to a worker, with every path as the worker will see it.

    The playbook's directory (roles, plugins) goes to project/, the inventory to inventory/,
    a `@file` limit and any extravar naming a local file or directory to kiln_ship/; the worker
    unpacks them under `remote_dir`. kiln's callback stays off (the worker's ansible-runner uses
    its own) and so does mitogen; kiln's batched workers run over Ansible's linear strategy
    (kiln_linear, sent in the project's strategy_plugins/; the worker's kiln has
    kiln.strategy.batching) unless KILN_BATCH_WORKERS=0.
    """
    pdd = request.private_data_dir
    project = _ship(request.playbook.parent, pdd, "project")
    inventory = request.inventory
    if pdd not in inventory.parents:
        inventory = _ship(inventory, pdd, "inventory/" + inventory.name)
    kwargs = runner_kwargs(request, None)  # type: ignore[arg-type]
    del kwargs["event_handler"]
    kwargs["playbook"] = str(project / request.playbook.name)
    kwargs["inventory"] = str(inventory)
    env = {key: value for key, value in kwargs["envvars"].items() if key not in LOCAL_ONLY}
    env["ANSIBLE_CONFIG"] = f"{remote_dir}/ansible.cfg"
    if env.get("ANSIBLE_VAULT_IDENTITY_LIST"):  # the password files go with the job
        shipped = []
        for index, identity in enumerate(env["ANSIBLE_VAULT_IDENTITY_LIST"].split(",")):
            label, _, source = identity.partition("@")
            _ship(Path(source), pdd, f"kiln_ship/vault-{index}")
            shipped.append(f"{label or 'default'}@{remote_dir}/kiln_ship/vault-{index}")
        env["ANSIBLE_VAULT_IDENTITY_LIST"] = ",".join(shipped)
    if batch_workers():
        plugin = project / "strategy_plugins" / "kiln_linear.py"
        if not plugin.is_file():
            _ship(STRATEGY_DIR / plugin.name, pdd, f"project/strategy_plugins/{plugin.name}")
        env["ANSIBLE_STRATEGY"] = "kiln_linear"
    kwargs["envvars"] = env
    kwargs["settings"] = {**kwargs["settings"], "fact_cache": f"{remote_dir}/fact_cache"}
    if request.limit and request.limit.startswith("@"):
        _ship(Path(request.limit[1:]), pdd, "kiln_ship/limit")
        kwargs["limit"] = f"@{remote_dir}/kiln_ship/limit"
    extravars = dict(kwargs["extravars"])
    for key, value in extravars.items():
        if isinstance(value, str) and value.startswith("/") and Path(value).exists():
            _ship(Path(value), pdd, f"kiln_ship/{key}")
            extravars[key] = f"{remote_dir}/kiln_ship/{key}"
    kwargs["extravars"] = extravars
    return kwargs


def _unship_secrets(pdd: Path) -> None:
    """Once transmitted, the copies of the inventory and vault password files leave the run
    record (which must hold no secret)."""
    for path in pdd.glob("kiln_ship/vault-*"):
        path.unlink(missing_ok=True)
    shutil.rmtree(pdd / "inventory", ignore_errors=True)


class _Job(io.BytesIO):
    """The transmitted job, in memory until its length is known (worker_side reads it first);
    never on disk, since it holds the inventory and vault password files. transmit asks its
    output's name."""

    name = "<kiln job>"


class _Heartbeat(threading.Thread):
    """Writes worker_side's heartbeat into the worker's stdin every `interval` seconds, so
    its job keeps its lease; `finish` stops, says DONE when the stream came home whole, and
    closes the pipe (without DONE the worker kills the job, if it still runs)."""

    def __init__(self, pipe: Any, interval: float) -> None:
        super().__init__(name="kiln-heartbeat", daemon=True)
        self.pipe, self.interval = pipe, interval
        self.stopped = threading.Event()
        self.last = time.monotonic()

    def write(self, data: bytes) -> bool:
        try:
            self.pipe.write(data)
            self.pipe.flush()
        except (OSError, ValueError):  # the worker went away; process reports it
            return False
        self.last = time.monotonic()
        return True

    def run(self) -> None:
        while not self.stopped.wait(self.interval) and self.write(worker_side.HEARTBEAT):
            pass

    def finish(self, *, whole: bool) -> None:
        self.stopped.set()
        if self.is_alive():
            self.join()
        if whole:
            self.write(worker_side.DONE)
        with contextlib.suppress(OSError):
            self.pipe.close()


def run_playbook_streamed(
    request: PlaybookRequest,
    recorder: EventRecorder,
    targets: list[str] | None,
    command: list[str],
    remote_dir: str,
    heartbeat_s: float = 10.0,
) -> PlaybookResult:
    """Run one playbook on a worker controller through ansible-runner's streaming mode.

    `command` starts kiln.runner.worker_side's `run` there (ssh, usually), which runs
    `ansible-runner worker --private-data-dir REMOTE_DIR` under a lease: the job, transmitted
    here, goes into its stdin with its length first, then a heartbeat every `heartbeat_s`;
    process reads events and artifacts from its stdout into the same recorder, so results come
    home as if the play ran here. The result says how the command ended (`worker_rc`) and when
    the last heartbeat left (`heartbeat_at`): what kiln needs to tell a lost worker.
    """
    engine.prepare_dirs(request)
    kwargs = streamed_kwargs(request, remote_dir)
    pdd = request.private_data_dir
    job = _Job()
    try:
        engine.init_runner(streamer="transmit", _output=job, **kwargs).run()
    finally:
        _unship_secrets(pdd)
    framed = b"%d\n" % len(job.getbuffer()) + job.getvalue()
    with (pdd / "worker.stderr").open("wb") as stderr:
        proc = subprocess.Popen(  # noqa: S603 - an argv list built by kiln.runner.workers
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
        heartbeat = _Heartbeat(proc.stdin, heartbeat_s)
        whole = False
        try:
            if heartbeat.write(framed):
                heartbeat.start()
            processor = engine.init_runner(
                streamer="process",
                _input=proc.stdout,
                private_data_dir=str(pdd),
                ident=request.ident,
                event_handler=recorder,
                quiet=True,
            )
            processor.run()
            whole = processor.status != "error"
        finally:
            heartbeat.finish(whole=whole)
            proc.wait()
    artifact_dir = Path(processor.artifact_dir)
    rc_file = artifact_dir / "rc"
    rc = int(rc_file.read_text().strip()) if rc_file.is_file() else proc.returncode or None
    status = processor.status if processor.status != "unstarted" else "error"
    stopped = bool(recorder.no_hosts_remaining and status != "successful")
    return PlaybookResult(
        status=status,
        rc=rc,
        stats=recorder.stats,
        hosts=recorder.host_results(targets or [], stopped=stopped),
        batches=recorder.batches,
        no_hosts_remaining=recorder.no_hosts_remaining,
        artifact_data=recorder.artifact_data,
        artifact_dir=artifact_dir,
        worker_rc=proc.returncode,
        heartbeat_at=heartbeat.last,
    )
