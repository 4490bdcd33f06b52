"""The run's worker controllers: a shard run on one, and run again on another when it is lost.

    pool = WorkerPool(plan.workers, workers.transport(rollout), run_id, log)
    ran = pool.run(shard, stage, request, new_recorder)   # Ran: result, recorder, worker, lost

A worker is lost when its stream ends before the play's recap and the command that reached it
failed (kiln.runner.workers.lost): its machine died, or the network to it broke. Before the
shard runs anywhere else, the lost worker's job must be gone, so no two runs of one shard ever
act on a node at once:

- kiln stops it (`workers.stop_command`: every process naming the job's directory) when the
  worker still answers;
- else the job stops itself: it has heard no heartbeat since the stream broke, and its lease
  (kiln.runner.worker_side) runs out LEASE_S after the last one kiln sent; kiln waits that long
  (and one heartbeat more) before it runs the shard again.

The shard then runs, whole, on the next worker still standing (a stage is idempotent: hosts
the lost worker had finished report no change). A lost worker takes no further shard in this
run. With no worker left, the shard's hosts are unreachable, with the reason.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kiln.inventory import Node
from kiln.plan.shards import Shard
from kiln.records.runs import now
from kiln.records.status import HostStatus
from kiln.runner import stream, workers
from kiln.runner.engine import PlaybookRequest, PlaybookResult
from kiln.runner.events import CappedLog, EventRecorder, HostResult

STOP_TIMEOUT_S = 60


@dataclass
class Ran:
    result: PlaybookResult
    recorder: EventRecorder
    worker: str | None  # where the shard ran last (None: nowhere, every worker lost)
    lost: list[str] = field(default_factory=list)  # workers it was lost on, in order


class WorkerPool:
    def __init__(
        self,
        nodes: Mapping[str, Node],
        transport: workers.Transport,
        run_id: str,
        log: CappedLog | None = None,
    ) -> None:
        self.nodes, self.transport, self.run_id, self.log = nodes, transport, run_id, log
        self.runner = transport.runner
        self.lost: dict[str, str] = {}  # worker -> why, for the rest of the run
        self.lock = threading.Lock()

    def standing(self, preferred: str) -> str | None:
        """`preferred` while it stands, else the next worker after it that does."""
        names = list(self.nodes)
        start = names.index(preferred) if preferred in names else 0
        with self.lock:
            for name in names[start:] + names[:start]:
                if name not in self.lost:
                    return name
        return None

    def run(
        self,
        shard: Shard,
        stage: str,
        request: PlaybookRequest,
        new_recorder: Callable[[], EventRecorder],
    ) -> Ran:
        directory = workers.remote_dir(self.run_id, stage, shard.name)
        if self.runner.startswith("/"):  # its venv's ansible-playbook first on the job's PATH
            bin_dir = os.path.dirname(self.runner)
            request.envvars["PATH"] = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        lost: list[str] = []
        recorder = new_recorder()
        worker = self.standing(shard.worker or "")
        while worker is not None:
            result = stream.run_playbook_streamed(
                request,
                recorder,
                list(shard.hosts),
                self.transport.worker_command(self.nodes[worker], directory),
                directory,
                heartbeat_s=workers.HEARTBEAT_S,
            )
            if not workers.lost(result):
                return Ran(result, recorder, worker, lost)
            lost.append(worker)
            self._fence(worker, stage, shard, directory, result, request)
            worker = self.standing(worker)
            recorder = new_recorder()
        return Ran(self._nowhere(shard, lost, request), recorder, None, lost)

    def _fence(
        self,
        worker: str,
        stage: str,
        shard: Shard,
        directory: str,
        result: PlaybookResult,
        request: PlaybookRequest,
    ) -> None:
        """Mark `worker` lost and make sure its job of this shard is gone (see above)."""
        why = f"its stream ended before the recap (exit {result.worker_rc})"
        stderr = _tail(request.private_data_dir / "worker.stderr")
        if stderr:
            why += f": {stderr}"
        with self.lock:
            self.lost.setdefault(worker, why)
        command = self.transport.stop_command(self.nodes[worker], directory)
        try:
            stopped = (
                subprocess.run(  # noqa: S603 - an argv list built by kiln.runner.workers
                    command, capture_output=True, timeout=STOP_TIMEOUT_S, check=False
                ).returncode
                == 0
            )
        except subprocess.TimeoutExpired:
            stopped = False
        waited = 0.0
        if not stopped:  # unreachable: its job dies by its lease, counted from our last beat
            sent = result.heartbeat_at or time.monotonic()
            waited = max(0.0, sent + workers.LEASE_S + workers.HEARTBEAT_S - time.monotonic())
            time.sleep(waited)
        if self.log is not None:
            self.log.write_event({
                "event": "kiln_worker_lost", "stage": stage, "shard": shard.name,
                "worker": worker, "why": why, "job": "stopped" if stopped else "lease expired",
                "waited_s": round(waited, 1), "t": now().isoformat(timespec="seconds"),
            })  # fmt: skip

    def _nowhere(self, shard: Shard, lost: list[str], request: PlaybookRequest) -> PlaybookResult:
        """Every worker lost: the shard's hosts unreachable, saying so."""
        message = f"no worker left to run shard {shard.name}; lost: " + ", ".join(
            f"{w} ({self.lost.get(w, '?')})" for w in lost or self.lost
        )
        hosts = {
            host: HostResult(host, status=HostStatus.UNREACHABLE, unreachable=1, message=message)
            for host in shard.hosts
        }
        return PlaybookResult(
            status="error", rc=None, stats=None, hosts=hosts, batches=0,
            no_hosts_remaining=False, artifact_data={}, artifact_dir=request.private_data_dir,
        )  # fmt: skip


def _tail(path: Path, size: int = 300) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")[-size:]
    except OSError:
        return ""
    return " ".join(text.split())
