"""One provision at a time per inventory: a lock file under the state dir.

The file holds pid, host, start time and a lock id. A lock left by a dead process on this same
host is stale and is cleared on the next acquire; a lock held from another host can only be
cleared by `kiln unlock INVENTORY --force --lock-id ID` (kiln cannot see that process).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from kiln.errors import EnvironmentProblem, InvalidInputError
from kiln.records.runs import inventory_key, now, state_dir


@dataclass(frozen=True, slots=True)
class LockInfo:
    lock_id: str
    pid: int
    host: str
    started: str
    inventory: str
    run_id: str | None = None

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} since {self.started} (lock id {self.lock_id})"


def lock_path(inventory: Path, state: Path | None = None) -> Path:
    return (state or state_dir()) / "locks" / f"{inventory_key(inventory)}.lock"


def read_lock(inventory: Path, state: Path | None = None) -> LockInfo | None:
    path = lock_path(inventory, state)
    try:
        data = json.loads(path.read_text())
        return LockInfo(**data)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        # A torn or foreign file: report it with what can be said.
        return LockInfo("unknown", -1, "unknown", "unknown", str(inventory))


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(info: LockInfo) -> bool:
    """Stale: taken on this host by a process that no longer exists."""
    return info.host == socket.gethostname() and not _pid_alive(info.pid)


class InventoryLock:
    """Context manager: `with InventoryLock(inventory, run_id=...) as lock:`."""

    def __init__(self, inventory: Path, *, run_id: str | None = None, state: Path | None = None):
        self.inventory = Path(inventory).resolve()
        self.path = lock_path(self.inventory, state)
        self.run_id = run_id
        self.info: LockInfo | None = None
        self.cleared_stale: LockInfo | None = None

    def acquire(self) -> LockInfo:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        info = LockInfo(
            lock_id=secrets.token_hex(4),
            pid=os.getpid(),
            host=socket.gethostname(),
            started=now().isoformat(timespec="seconds"),
            inventory=str(self.inventory),
            run_id=self.run_id,
        )
        for _attempt in range(2):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = read_lock(self.inventory, self.path.parent.parent)
                if holder is not None and is_stale(holder):
                    self.cleared_stale = holder
                    self.path.unlink(missing_ok=True)
                    continue
                raise EnvironmentProblem(
                    f"inventory {self.inventory} is locked by "
                    + (holder.describe() if holder else "another run"),
                    hint="wait for that run; if it is gone: kiln unlock "
                    f"{self.inventory} --force --lock-id {holder.lock_id if holder else 'ID'}",
                ) from None
            with os.fdopen(fd, "w") as handle:
                json.dump(asdict(info), handle)
            self.info = info
            return info
        raise EnvironmentProblem(f"could not take the lock {self.path}")

    def release(self) -> None:
        if self.info is None:
            return
        current = read_lock(self.inventory, self.path.parent.parent)
        if current is not None and current.lock_id == self.info.lock_id:
            self.path.unlink(missing_ok=True)
        self.info = None

    def __enter__(self) -> InventoryLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def force_unlock(inventory: Path, lock_id: str, state: Path | None = None) -> LockInfo | None:
    """Clear the lock on `inventory` if its id is `lock_id`; returns what was cleared."""
    inventory = Path(inventory).resolve()
    holder = read_lock(inventory, state)
    if holder is None:
        return None
    if holder.lock_id != lock_id:
        raise InvalidInputError(
            f"the lock on {inventory} has id {holder.lock_id}, not {lock_id}",
            hint=f"it is held by {holder.describe()}",
        )
    lock_path(inventory, state).unlink(missing_ok=True)
    return holder
