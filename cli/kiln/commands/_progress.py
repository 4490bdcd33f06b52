"""The stage progress display of `kiln provision` and `kiln burnin`'s runtime install.

One progress line per stage on stderr: a rich live display on a terminal, plain timestamped
lines off it (logs, CI). Never silent for more than HEARTBEAT_S: while a task runs and no host
has answered, a heartbeat names the task, the hosts still running it and the time spent, on
the live line and, off a terminal, as a plain line. A daemon thread ticks the heartbeat; tests
call `tick()` with a fake clock instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from kiln.console import err, safe
from kiln.plan.stages import Stage
from kiln.runner.events import StageProgress

if TYPE_CHECKING:
    from kiln.runner.outcome import StageOutcome

HEARTBEAT_S = 10.0  # at most this long without a line (the promise is 15 s)
NAMED = 4  # hosts named in a heartbeat; more are counted


def stamp(wall: Callable[[], float] = time.time) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall()))


class StageDisplay:
    """The runner's listener (kiln.runner.execute): stage_started, progress, stage_finished."""

    def __init__(
        self,
        *,
        rich: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        every: float = HEARTBEAT_S,
        thread: bool = True,
    ) -> None:
        self.rich = err.is_terminal if rich is None else rich
        self.clock, self.wall, self.every, self.thread = clock, wall, every, thread
        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=err,
            transient=False,
        )
        self.task_id: Any = None
        self.batches = 0
        self.stage: str | None = None
        self.hosts: list[str] = []
        self.last_task: str | None = None
        self.answered: set[str] = set()
        self.text = ""
        self.stage_start = self.task_start = self.last_line = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def __enter__(self) -> StageDisplay:
        if self.rich:
            self.bar.start()
        if self.thread:
            threading.Thread(target=self._beat, daemon=True, name="kiln-heartbeat").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.rich:
            self.bar.stop()

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()

    def _say(self, line: str) -> None:
        """A plain line, timestamped; it resets the heartbeat."""
        self.last_line = self.clock()
        err.print(f"[dim]{stamp(self.wall)}[/] {line}")

    def stage_started(self, stage: Stage, hosts: list[str], batches: int) -> None:
        with self._lock:
            self.batches, self.last_task, self.stage = batches, None, stage.name
            self.hosts, self.answered = list(hosts), set()
            self.stage_start = self.task_start = self.clock()
            line = f"{stage.name}: {len(hosts)} host(s) in {batches} batch(es)"
            if self.rich:
                self.last_line = self.clock()
                self.task_id = self.bar.add_task(line, total=None)
            else:
                self._say(line)

    def progress(self, update: StageProgress) -> None:
        with self._lock:
            self._progress(update)

    def _progress(self, update: StageProgress) -> None:
        c = update.counts
        where = (
            f"shards {update.shards_done}/{update.shards} done, {update.shards_running} running"
            if update.shards > 1
            else f"batch {update.batch}/{self.batches}"
        )
        self.text = (
            f"[bold]{update.stage}[/] {where}  ok {c['ok']}  "
            f"changed {c['changed']}  failed {c['failed']}  unreachable {c['unreachable']}"
        )
        if update.task != self.last_task:
            self.last_task, self.answered = update.task, set()
            self.task_start = self.clock()
            if not self.rich:
                self._say(f"{update.stage}: task {safe(update.task)}")
        elif update.last_host:
            self.answered.add(update.last_host)
        if self.rich:
            self.last_line = self.clock()
            self.bar.update(
                self.task_id, description=f"{self.text}  [dim]{safe(update.task or '')}[/]"
            )
        if update.last_message:
            self._say(
                f"{update.stage}: {safe(update.last_host)} {update.last_status}: "
                f"{safe(update.last_message)}"
            )
            update.last_message = None

    def heartbeat(self) -> str:
        """`<stage>: still running '<task>' on <hosts> (<n>s in the task, <m>s in the stage)`."""
        now = self.clock()
        waiting = [h for h in self.hosts if h not in self.answered]
        names = ", ".join(waiting[:NAMED]) + (
            f" +{len(waiting) - NAMED}" if len(waiting) > NAMED else ""
        )
        on = f" on {len(waiting)} host(s): {names}" if waiting else ""
        task, stage = now - self.task_start, now - self.stage_start
        return (
            f"{self.stage}: still running '{self.last_task or 'starting'}'{on} "
            f"({task:.0f}s in the task, {stage:.0f}s in the stage)"
        )

    def tick(self) -> None:
        """Show the heartbeat when nothing was shown for `every` seconds during a stage."""
        with self._lock:
            if self.stage is None or self.clock() - self.last_line < self.every:
                return
            line = safe(self.heartbeat())
            if self.rich:
                self.last_line = self.clock()
                self.bar.update(self.task_id, description=f"{self.text or line}  [dim]{line}[/]")
            else:
                self._say(line)

    def stage_finished(self, stage: Stage, result: StageOutcome) -> None:
        with self._lock:
            self.stage = None
            counts: dict[str, int] = {}
            for host in result.hosts.values():
                counts[host.status] = counts.get(host.status, 0) + 1
            text = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
            line = f"{stage.name}: {result.status} ({text or 'no host'})"
            if self.rich:
                self.bar.update(self.task_id, description=line, total=1, completed=1)
            else:
                self._say(line)
