"""`kiln unlock`: clear the provision lock of an inventory left behind by a dead run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiln.console import err
from kiln.errors import InvalidInputError
from kiln.records.lock import force_unlock, read_lock


def unlock(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    force: Annotated[bool, typer.Option("--force", help="Really clear the lock.")] = False,
    lock_id: Annotated[str | None, typer.Option(help="The id of the lock to clear.")] = None,
) -> int:
    """Clear a stale provision lock (needs --force and the lock id that `provision` printed)."""
    holder = read_lock(inventory)
    if holder is None:
        err.print(f"{inventory.resolve()} is not locked")
        return 0
    if not force or not lock_id:
        raise InvalidInputError(
            f"{inventory.resolve()} is locked by {holder.describe()}",
            hint=f"if that run is gone: kiln unlock {inventory} --force --lock-id {holder.lock_id}",
        )
    cleared = force_unlock(inventory, lock_id)
    if cleared is not None:
        err.print(f"cleared the lock held by {cleared.describe()}")
    return 0
