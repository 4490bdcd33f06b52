"""Which backend keeps a run's lock and the cluster's state, and the run's hold on them.

`kiln_state.backend` in the inventory:
  auto (default)  the controller (first host of kiln_controllers) when its lock can be taken;
                  the local runs home only for a cluster not brought up yet: the controller
                  answered that its state directory does not exist (and it could not be made),
                  and no run record here took this inventory through the slurm stage. Anything
                  else (unreachable, timed out, a state directory that exists but fails) exits 3:
                  a transient fault must never let two runners proceed on local locks.
  controller      the controller, or exit 3 naming why it cannot be used
  local           the local runs home only (one runner, one directory: today's behaviour)

The local lock (kiln.records.lock) is always taken first: it keeps two runs from one runs home
apart even when the controller cannot be reached. The core never prints: what to say goes in
`notes`.
"""

from __future__ import annotations

import contextlib
import getpass
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.errors import EnvironmentProblem
from kiln.fleet import settings_for
from kiln.inventory import Cluster
from kiln.records.lock import InventoryLock, LockInfo, LockLost, read_lock
from kiln.records.runs import provisioned_hosts, read_summary, runs_home
from kiln.records.status import GOOD
from kiln.state import cluster as doc
from kiln.state.controller import (
    ControllerLock,
    StateUnavailable,
    probe,
    read_state,
    state_dir_absent,
    update_state,
)
from kiln.state.lifecycle import LifecycleLog, local_log
from kiln.state.remote import Remote, RemoteUnavailable, SshRemote

RemoteFactory = Callable[[Cluster], Remote]


def controller_remote(cluster: Cluster) -> Remote:
    """The first controller over kiln's SSH layer."""
    if not cluster.controllers:
        raise RemoteUnavailable("the inventory has no kiln_controllers host")
    node = cluster.controllers[0]
    return SshRemote(node.name, settings_for(node.name, node.address, node.hostvars))


def _me() -> str:
    with contextlib.suppress(KeyError, OSError):
        return f"{getpass.getuser()}@{socket.gethostname()}"
    return socket.gethostname()


class SharedState:
    """`with SharedState(cluster, run_id=...) as shared:` holds the locks for the run.

    shared.backend     "controller" or "local": where the lock and the state are
    shared.info        the holder written (what the run's summary calls its lock)
    shared.joined()    nodes that have joined (the controller's state, and local records)
    shared.push_run()  record a finished run in the controller's state
    shared.notes       lines for the operator (which backend, and why)
    shared.check()     LockLost (exit 3) unless the run still holds its locks: before each action
    shared.lost        whether a check or the heartbeat found the lock lost (still_held(): asks)

    `command` names the holder's kiln command for whoever finds the lock held; `read=False`
    skips reading the cluster's state (a command that only needs the lock: drain, resume).
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        run_id: str | None = None,
        home: Path | None = None,
        remote_factory: RemoteFactory | None = None,
        command: str | None = None,
        read: bool = True,
    ) -> None:
        self.cluster = cluster
        self.run_id, self.command, self.read = run_id, command, read
        self.home = home or runs_home()
        self.spec = cluster.state
        self.remote_factory = remote_factory or controller_remote
        self.local = InventoryLock(
            cluster.inventory_dir, run_id=run_id, home=self.home, command=command
        )
        self.remote: Remote | None = None
        self.controller: ControllerLock | None = None
        self.backend = "local"
        self.notes: list[str] = []
        self._state: dict[str, Any] = {}
        self._lost: LockLost | None = None

    @property
    def info(self) -> LockInfo | None:
        return (self.controller or self.local).info

    @property
    def cleared_stale(self) -> LockInfo | None:
        return (self.controller and self.controller.cleared_stale) or self.local.cleared_stale

    @property
    def lost(self) -> bool:
        return self._lost is not None or (
            self.controller is not None and self.controller.lost.is_set()
        )

    def check(self) -> None:
        """Raise LockLost unless this run still holds its locks (a round trip to the
        controller); once lost, always."""
        if self._lost is None:
            try:
                self.local.check()
                if self.controller is not None:
                    self.controller.check()
            except LockLost as error:
                self._lost = error
        if self._lost is not None:
            raise self._lost

    def still_held(self) -> bool:
        """check(), as a yes or no."""
        try:
            self.check()
        except LockLost:
            return False
        return True

    def acquire(self) -> SharedState:
        self.local.acquire()
        try:
            self._take_controller()
        except BaseException:
            self.release()
            raise
        return self

    def _take_controller(self) -> None:
        mode = self.spec.backend
        if mode == "local":
            self.notes.append(f"state: local ({self.local.path.parent.parent}; kiln_state.backend)")
            return
        try:
            self.remote = self.remote_factory(self.cluster)
            lock = ControllerLock(
                self.remote,
                str(self.cluster.inventory_dir),
                run_id=self.run_id,
                command=self.command,
                directory=self.spec.path,
            )
            lock.acquire()
            try:
                self._state = read_state(self.remote, self.spec.path) if self.read else {}
            except BaseException:
                lock.release()
                raise
            self.controller, self.backend = lock, "controller"
        except (RemoteUnavailable, StateUnavailable, TimeoutError) as error:
            reason = getattr(error, "message", None) or str(error)
            if mode == "controller":
                self._close_remote()
                raise EnvironmentProblem(
                    f"kiln_state.backend is controller and {reason}",
                    hint="reach the controller (or set kiln_state.backend: local for a cluster "
                    "without one yet)",
                ) from error
            refusal = self._refuse_local(error, reason)
            self._close_remote()
            if refusal is not None:
                raise refusal from error
            self.notes.append(
                f"state: local ({self.local.path.parent.parent}): {reason}; the controller has "
                f"no {self.spec.path} yet and no run here took this inventory through the slurm "
                "stage (a first bring-up)"
            )
            return
        self.notes.append(f"state: {self.controller.where}")

    def _refuse_local(self, error: Exception, reason: str) -> EnvironmentProblem | None:
        """Why `auto` must not fall back to the local lock after `error`; None when it may
        (the cluster has not been brought up: see the module's docstring)."""
        path = self.spec.path
        unreachable = EnvironmentProblem(
            f"cannot reach the controller's lock: {reason}",
            hint="retry when the controller answers, or set kiln_state.backend: local if this "
            "cluster has no controller yet (docs/gitops.md, Where state lives)",
        )
        if self.remote is None or not isinstance(error, StateUnavailable):
            return unreachable  # no answer at all: nothing tells a first bring-up apart
        try:
            absent = state_dir_absent(self.remote, path)
        except (RemoteUnavailable, StateUnavailable, TimeoutError):
            return unreachable
        if not absent:
            return EnvironmentProblem(
                f"cannot use the controller's lock: {reason} ({path} exists there, or cannot "
                "be looked into: the cluster keeps its state there)",
                hint=f"fix {path} on the controller, then retry",
            )
        run_id = brought_up(self.cluster.inventory_dir, self.home)
        if run_id is not None:
            return EnvironmentProblem(
                f"cannot use the controller's lock: {reason}; run {run_id} took this inventory "
                "through the slurm stage, so `auto` no longer falls back to the local lock",
                hint=f"let the login user create {path} on the controller (root, or sudo -n), "
                "or set kiln_state.backend: local to keep this cluster's lock in one runs home",
            )
        return None

    def joined(self) -> frozenset[str]:
        """Nodes that have joined: the controller's record, and this runs home's run records."""
        local = provisioned_hosts(self.cluster.inventory_dir, self.home)
        return frozenset(doc.joined_nodes(self._state) | local)

    def push_run(self, summary: dict[str, Any]) -> None:
        """Record a finished run in the controller's state; a failure is a note, not a failure
        of the run (the run record keeps everything)."""
        if self.remote is None or self.controller is None:
            return
        versions = self.cluster.versions.model_dump()
        members = [node.name for node in self.cluster.nodes]
        patch = doc.run_patch(summary, versions, _me(), self.cluster.name, members)
        if patch is None:
            return
        try:
            update_state(self.remote, patch, self.spec.path)
        except StateUnavailable as error:
            self.notes.append(f"state: not saved on the controller: {error.message}")

    def lifecycle_log(self) -> LifecycleLog:
        """The nodes' lifecycle log beside the state this run holds: the controller's, else
        the runs home's (a cluster whose state is local, or a first bring-up)."""
        if self.remote is not None and self.controller is not None:
            return LifecycleLog(self.remote, self.spec.path)
        return local_log(self.cluster, self.home)

    def _close_remote(self) -> None:
        if self.remote is not None:
            with contextlib.suppress(Exception):
                self.remote.close()
        self.remote = None

    def release(self) -> None:
        if self.controller is not None:
            self.controller.release()
            self.controller = None
        self._close_remote()
        self.local.release()

    def __enter__(self) -> SharedState:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def brought_up(inventory: Path, home: Path) -> str | None:
    """The id of a run in this runs home that took a node of `inventory` through the slurm
    stage (ok or changed): the cluster has been brought up. None when no run record says so."""
    runs = home / "runs"
    if not runs.is_dir():
        return None
    wanted = str(Path(inventory).resolve())
    for path in sorted(runs.iterdir(), reverse=True):
        if not (path / "summary.json").is_file():
            continue  # a run in progress, or killed before its summary
        summary = read_summary(path / "summary.json")
        if summary.get("inventory") != wanted or summary.get("check"):
            continue
        if any((s or {}).get("slurm") in GOOD for s in (summary.get("hosts") or {}).values()):
            return str(summary.get("run_id") or path.name)
    return None


def push_verdicts(
    cluster: Cluster,
    verdicts: dict[str, str],
    run_id: str,
    at: str,
    remote_factory: RemoteFactory | None = None,
) -> str:
    """Record burn-in verdicts in the controller's state; returns a line saying where."""
    if cluster.state.backend == "local" or not verdicts:
        return "verdicts: kept in the local run record only"
    remote = None
    try:
        remote = (remote_factory or controller_remote)(cluster)
        update_state(remote, doc.verdict_patch(verdicts, run_id, at), cluster.state.path)
    except (RemoteUnavailable, StateUnavailable, TimeoutError) as error:
        return f"verdicts: not saved on the controller: {getattr(error, 'message', error)}"
    finally:
        if remote is not None:
            with contextlib.suppress(Exception):
                remote.close()
    return f"verdicts: saved on {remote.where}:{cluster.state.path}"


@dataclass(frozen=True)
class LockStatus:
    """Who holds the locks of an inventory: the local one and the controller's."""

    local: LockInfo | None
    controller: LockInfo | None
    where: str  # where the controller's lock was looked for, or why it was not
    reachable: bool

    @property
    def held(self) -> bool:
        return self.local is not None or self.controller is not None


def lock_status(
    cluster: Cluster, home: Path | None = None, remote_factory: RemoteFactory | None = None
) -> LockStatus:
    """Look at both locks; changes nothing."""
    local = read_lock(cluster.inventory_dir, home)
    if cluster.state.backend == "local":
        return LockStatus(local, None, "kiln_state.backend is local", False)
    remote = None
    try:
        remote = (remote_factory or controller_remote)(cluster)
        holder = probe(remote, cluster.state.path)
        return LockStatus(local, holder, f"controller {remote.where}:{cluster.state.path}", True)
    except (RemoteUnavailable, StateUnavailable, TimeoutError) as error:
        return LockStatus(local, None, getattr(error, "message", None) or str(error), False)
    finally:
        if remote is not None:
            with contextlib.suppress(Exception):
                remote.close()
