"""The nodes' lifecycle log in the cluster's shared state (`lifecycle.jsonl` beside state.json
on the controller, or in the runs home when kiln_state.backend is local), and the evidence of a
run or a burn-in turned into its events.

    log = lifecycle_log(cluster)                 # where the cluster's shared state is
    lives = replay(log.events())                 # kiln.lifecycle
    log.append(after_burnin(lives, evidence))

Appends happen under the cluster's lock (provision, burn-in, triage and rma hold it), so a
read, the events derived from it and their append are one step. Each append is one write of
whole lines under state.lock; a line a killed kiln left cut short is skipped by the reader and
ended before the next append.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.errors import KilnError
from kiln.inventory import Cluster
from kiln.lifecycle import Event, NodeLife, replay
from kiln.lifecycle.derive import BurninEvidence, RunEvidence, after_burnin, after_run
from kiln.lifecycle.log import read_lines, to_text
from kiln.records.runs import inventory_key, runs_home
from kiln.records.status import GOOD, HostStatus
from kiln.state.controller import OPEN_DIRECTORY, UNWRITABLE, StateUnavailable, command
from kiln.state.remote import LocalRemote, Remote, RemoteUnavailable, run

if TYPE_CHECKING:
    from kiln.state.backend import SharedState

LOG = "lifecycle.jsonl"
SAVED = "KILN-LIFECYCLE-SAVED"
# The log as one line, gzip'd and base64'd: a 12,500-node bring-up's log is megabytes of
# text, a tenth of it on the wire, and one line is read in one go.
READ_SCRIPT = f'[ -r "$D/{LOG}" ] && {{ gzip -c "$D/{LOG}" | base64 -w0; echo; }}; exit 0\n'
APPEND_SCRIPT = (
    OPEN_DIRECTORY
    + f'exec 8>>"$D/state.lock" && flock -w 30 8 || {{ echo "{UNWRITABLE} state.lock"; exit 4; }}\n'
    f'F="$D/{LOG}"\n'
    # a line cut short by a killed append is ended, so the new lines start lines of their own
    '[ -s "$F" ] && [ -n "$(tail -c 1 "$F")" ] && echo >>"$F"\n'
    f'cat >>"$F" && sync "$F" && echo {SAVED}\n'
)
READ_TIMEOUT_S = 60.0


class LifecycleLog:
    """The log in one state directory, reached through `remote`."""

    def __init__(self, remote: Remote, directory: str) -> None:
        self.remote, self.directory = remote, directory
        self.where = f"{remote.where}:{directory}/{LOG}"

    def events(self) -> list[Event]:
        try:
            lines = run(self.remote, command(READ_SCRIPT, self.directory), timeout=READ_TIMEOUT_S)
        except (RemoteUnavailable, TimeoutError) as error:
            raise StateUnavailable(f"cannot read {self.where}: {error}") from error
        packed = "".join(line for line in lines if line.strip())
        try:
            text = (
                gzip.decompress(base64.b64decode(packed, validate=True)).decode() if packed else ""
            )
        except (ValueError, OSError, EOFError) as error:  # binascii.Error is a ValueError
            said = " ".join(lines)[-300:]
            raise StateUnavailable(f"cannot read {self.where}: {said or error}") from error
        return read_lines(text.splitlines(), self.where)

    def lives(self) -> dict[str, NodeLife]:
        return replay(self.events(), in_order=True)

    def append(self, events: Iterable[Event]) -> int:
        text = to_text(events)
        if not text:
            return 0
        try:
            lines = run(self.remote, command(APPEND_SCRIPT, self.directory), stdin=text.encode())
        except (RemoteUnavailable, TimeoutError) as error:
            raise StateUnavailable(f"cannot append to {self.where}: {error}") from error
        if SAVED not in lines:
            said = " ".join(lines).replace(UNWRITABLE, "").strip() or "no answer"
            raise StateUnavailable(f"cannot append to {self.where}: {said}")
        return text.count("\n")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.remote.close()


def local_directory(cluster: Cluster, home: Path | None = None) -> Path:
    """Where a cluster whose state is local keeps its lifecycle log (one per inventory)."""
    return (home or runs_home()) / "state" / inventory_key(cluster.inventory_dir)


def local_log(cluster: Cluster, home: Path | None = None) -> LifecycleLog:
    directory = local_directory(cluster, home)
    return LifecycleLog(LocalRemote("local"), str(directory))


def lifecycle_log(
    cluster: Cluster,
    *,
    home: Path | None = None,
    remote_factory: Callable[[Cluster], Remote] | None = None,
) -> LifecycleLog:
    """The cluster's log where its shared state is: the controller unless kiln_state.backend
    is local (StateUnavailable, exit 3, when the controller cannot be reached)."""
    if cluster.state.backend == "local":
        return local_log(cluster, home)
    from kiln.state.backend import controller_remote

    try:
        remote = (remote_factory or controller_remote)(cluster)
    except RemoteUnavailable as error:
        raise StateUnavailable(f"cannot reach the controller's lifecycle log: {error}") from error
    return LifecycleLog(remote, cluster.state.path)


def _epoch(text: Any, default: float) -> float:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return default


def run_evidence(summary: Mapping[str, Any], compute: Iterable[str], at: float) -> RunEvidence:
    """What a provision run's summary shows of the compute nodes: answered at all (a stage
    status other than unreachable or not run), joined (its slurm stage ok or changed), and why
    the slurm stage quarantined a node (the role's `kiln_quarantined` statistic)."""
    wanted = set(compute)
    hosts = {h: s for h, s in (summary.get("hosts") or {}).items() if h in wanted and s}
    silent = {HostStatus.UNREACHABLE, HostStatus.NOT_RUN}
    reached = {h for h, s in hosts.items() if any(v not in silent for v in s.values())}
    joined = {h for h, s in hosts.items() if s.get("slurm") in GOOD}
    started = _epoch(summary.get("started"), at)
    return RunEvidence(
        run_id=str(summary.get("run_id") or "unknown"),
        started=started,
        finished=_epoch(summary.get("finished"), at),
        reached=frozenset(reached | joined),
        joined=frozenset(joined),
        quarantined={
            h: str(why) for h, why in (summary.get("quarantined") or {}).items() if h in wanted
        },
    )


def record(log: LifecycleLog, derive: Callable[[dict[str, NodeLife]], list[Event]]) -> str:
    """Read the log, derive the events the evidence implies and append them; the line to show.
    A log that cannot be read or written is a note, not a failure of the run that gave the
    evidence: its run record keeps it."""
    try:
        events = derive(log.lives())
        appended = log.append(events)
    except KilnError as error:
        return f"lifecycle: not recorded in {log.where}: {error.message}"
    moved = len({event.node for event in events if not event.inferred})
    return f"lifecycle: {appended} event(s), {moved} node(s) moved ({log.where})"


def record_run(shared: SharedState, summary: Mapping[str, Any]) -> str | None:
    """The lifecycle events of a finished provision run (None for a check run: it changed
    nothing), appended beside the state `shared` holds."""
    if summary.get("check"):
        return None
    compute = [node.name for node in shared.cluster.compute]
    evidence = run_evidence(summary, compute, time.time())
    return record(shared.lifecycle_log(), lambda lives: after_run(lives, compute, evidence))


def record_burnin(
    shared: SharedState,
    run_id: str,
    results: Mapping[str, str],
    reasons: Mapping[str, str],
    checks: Mapping[str, str],
    in_service: Iterable[str],
    under_drain: Mapping[str, str] | None = None,
) -> str:
    """The lifecycle events of a judged burn-in: `results` node -> pass/fail/not_tested (the
    shared state's words), `reasons` each failing node's drain reason, `checks` its first
    failing check, `in_service` the nodes that run jobs after it, `under_drain` the drain
    each node was tested under (a health check's: the node had failed before it)."""
    failing = [node for node, result in results.items() if result == "fail"]
    evidence = BurninEvidence(
        run_id=run_id,
        at=time.time(),
        passed=frozenset(node for node, result in results.items() if result == "pass"),
        failed={node: reasons.get(node) or "failed" for node in failing},
        checks={node: checks[node] for node in failing if node in checks},
        in_service=frozenset(in_service),
        under_drain=dict(under_drain or {}),
    )
    return record(shared.lifecycle_log(), lambda lives: after_burnin(lives, evidence))
