"""One provision at a time per inventory and runs home: a kernel lock on a file under it.

The lock is `fcntl.flock` on `<home>/locks/<inventory-key>.lock`, held on an open file for the
whole run; the file also holds the holder's JSON (user, host, pid, start time, lock id, run id)
for the message a second run gets. The kernel drops the lock when the holding process exits,
however it exits, so a lock cannot outlive its run: there is no stale lock and no takeover.
The file is never unlinked (unlinking a lock file lets a later taker lock a new inode while an
earlier one still holds the old: two holders). What a dead run left in the file is only history,
reported as `cleared_stale` when the next run takes the lock.

This is the local lock: it keeps two runs from one runs home apart. Two runs from two machines or
directories are kept apart by the lock on the controller (kiln.state, docs/gitops.md). A command
that holds the cluster's lock (kiln.state.SharedState) hands it to each run it starts
(kiln.runner.execute's `lock`): a run never takes a lock of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import secrets
import socket
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from kiln.errors import EnvironmentProblem
from kiln.records.runs import inventory_key, now, runs_home

# A taker retries this long before calling the lock held: covers the instant a `kiln unlock`
# probe holds it to look.
PROBE_GRACE_S = 0.3


@dataclass(frozen=True, slots=True)
class LockInfo:
    lock_id: str
    pid: int
    host: str
    started: str
    inventory: str
    run_id: str | None = None
    user: str = "unknown"
    command: str | None = None  # the kiln command holding it: provision, burnin, drain ...

    def describe(self) -> str:
        run = f", run {self.run_id}" if self.run_id else ""
        what = f"`kiln {self.command}` by " if self.command else ""
        return (
            f"{what}{self.user} (pid {self.pid} on {self.host}) since {self.started}{run} "
            f"(lock id {self.lock_id})"
        )

    @classmethod
    def from_dict(cls, data: Any, inventory: str = "unknown") -> LockInfo:
        """A holder from its JSON; a torn or foreign document still gives a LockInfo."""
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in dict(data).items() if k in known})
        except (TypeError, ValueError):
            return cls("unknown", -1, "unknown", "unknown", inventory)

    @classmethod
    def mine(cls, inventory: str, run_id: str | None, command: str | None = None) -> LockInfo:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = str(os.getuid())
        return cls(
            lock_id=secrets.token_hex(4),
            pid=os.getpid(),
            host=socket.gethostname(),
            started=now().isoformat(timespec="seconds"),
            inventory=inventory,
            run_id=run_id,
            user=user,
            command=command,
        )


def lock_path(inventory: Path, home: Path | None = None) -> Path:
    return (home or runs_home()) / "locks" / f"{inventory_key(inventory)}.lock"


def _parse(text: str, inventory: Path) -> LockInfo | None:
    if not text.strip():
        return None
    try:
        return LockInfo.from_dict(json.loads(text), str(inventory))
    except ValueError:
        return LockInfo("unknown", -1, "unknown", "unknown", str(inventory))


def _try_flock(fd: int, grace: float) -> bool:
    deadline = time.monotonic() + grace
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def read_lock(inventory: Path, home: Path | None = None) -> LockInfo | None:
    """The holder of the lock on `inventory`, or None when nobody holds it (whatever a dead run
    left in the file). Looking takes the lock for an instant when it is free."""
    path = lock_path(Path(inventory).resolve(), home)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if _try_flock(fd, 0):
            return None
        text = os.pread(fd, 1 << 16, 0).decode(errors="replace")
        return _parse(text, inventory) or LockInfo("unknown", -1, "unknown", "unknown", "")
    finally:
        os.close(fd)


class LockLost(EnvironmentProblem):
    """The run no longer holds its lock: another run may hold it now (exit 3)."""


class InventoryLock:
    """Context manager: `with InventoryLock(inventory, run_id=...) as lock:`."""

    where = "local"

    def __init__(
        self,
        inventory: Path,
        *,
        run_id: str | None = None,
        home: Path | None = None,
        command: str | None = None,
    ):
        self.inventory = Path(inventory).resolve()
        self.path = lock_path(self.inventory, home)
        self.run_id, self.command = run_id, command
        self.info: LockInfo | None = None
        self.cleared_stale: LockInfo | None = None
        self._fd: int | None = None

    def acquire(self) -> LockInfo:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise EnvironmentProblem(
                f"cannot open the lock file {self.path}: {error.strerror or error}",
                hint="the state directory ($KILN_HOME, else ./.kiln) must be writable",
            ) from error
        if not _try_flock(fd, PROBE_GRACE_S):
            text = os.pread(fd, 1 << 16, 0).decode(errors="replace")
            os.close(fd)
            holder = _parse(text, self.inventory)
            raise EnvironmentProblem(
                f"inventory {self.inventory} is locked by "
                + (holder.describe() if holder else "another run (starting)"),
                hint="wait for that run to end: the lock is freed when its process exits "
                f"(kiln unlock {self.inventory} shows the holder)",
            )
        try:
            previous = _parse(os.pread(fd, 1 << 16, 0).decode(errors="replace"), self.inventory)
            info = LockInfo.mine(str(self.inventory), self.run_id, self.command)
            data = (json.dumps(asdict(info)) + "\n").encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except OSError as error:
            os.close(fd)  # closing drops the lock
            raise EnvironmentProblem(
                f"cannot write the lock file {self.path}: {error.strerror or error}"
            ) from error
        self._fd, self.info, self.cleared_stale = fd, info, previous
        return info

    def check(self) -> None:
        """Raise unless `path` is still the file this lock holds: removing or replacing it lets
        another run lock a new file while this one holds the old (see the module's docstring)."""
        if self._fd is None:
            return
        held = os.fstat(self._fd)
        try:
            now_there = os.stat(self.path)
            same = (now_there.st_dev, now_there.st_ino) == (held.st_dev, held.st_ino)
        except OSError:
            same = False
        if not same:
            raise LockLost(
                f"the local lock {self.path} was lost: the file was removed or replaced",
                hint="another run may hold it now; never remove a lock file (kiln unlock)",
            )

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)  # still ours: nobody else can be writing it
        os.close(self._fd)  # drops the lock
        self._fd, self.info = None, None

    def __enter__(self) -> InventoryLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
