"""`kiln unlock`: show who holds an inventory's provision locks (local and on the controller).

Both locks are kernel locks held by the run itself (flock on a local file; flock held by a shell
on the controller whose stdin is the run's SSH channel), so neither outlives its run: there is
never a stale lock to clear. `--force` takes the cluster's lock for an instant, as every command
that changes the cluster does (kiln.commands._lock): it succeeds only when no live run holds it,
so it can never break one, and it clears the holder record a killed run left behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiln.commands._lock import cluster_lock
from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, safe
from kiln.errors import EnvironmentProblem


def unlock(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    force: Annotated[
        bool, typer.Option("--force", help="Clear a lock whose holder is gone (see below).")
    ] = False,
    lock_id: Annotated[
        str | None, typer.Option(help="Accepted for old scripts; a lock has no id to clear.")
    ] = None,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Show the holder of the provision locks (exit 0 free, 3 held). A lock is freed by the
    kernel when its run's process exits or its SSH session to the controller closes, so
    --force never has a stale lock to clear and never breaks a live one.

    Example:

        kiln unlock inventories/sandbox
    """
    from kiln.inventory import require_valid
    from kiln.state import lock_status

    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    status = lock_status(cluster)
    where = status.where if status.reachable else f"controller lock not checked: {status.where}"
    err.print(safe(where))
    holders = [("local", status.local), ("controller", status.controller)]
    held = [(kind, info) for kind, info in holders if info is not None]
    if not held and force:  # take it for an instant: exit 3 naming the holder if one came
        with cluster_lock(cluster, "unlock --force", read=False) as shared:
            stale = shared.cleared_stale
        err.print(
            f"{safe(str(cluster.inventory_dir))} is not locked: nothing to clear (a lock cannot "
            "outlive its run)"
            + (f"; cleared the record a killed run left: {safe(stale.describe())}" if stale else "")
        )
        return 0
    if not held:
        err.print(f"{safe(str(cluster.inventory_dir))} is not locked")
        return 0
    lines = "; ".join(f"{kind} lock held by {info.describe()}" for kind, info in held)
    raise EnvironmentProblem(
        lines,
        hint=(
            "--force cannot clear it: the holder is alive (a dead run's lock is freed with it). "
            if force
            else ""
        )
        + "Stop that run (its pid on its host) or wait for it; a run whose connection to the "
        "controller was lost frees the controller's lock within 5 minutes.",
    )
