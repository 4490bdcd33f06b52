"""`kiln slurm ...`: Slurm maintenance; `rotate-munge-key` makes and distributes a new key."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiln.commands._lock import cluster_lock
from kiln.commands._progress import StageDisplay
from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.commands.provision import confirm_or_refuse, render_summary
from kiln.console import err, print_json, safe
from kiln.inventory import require_valid
from kiln.plan.stages import select_stages

ROTATE_EXTRAVARS = {"munge_rotate_key": True, "munge_cross_check": True}

app = typer.Typer(help="Slurm maintenance on a provisioned cluster.", no_args_is_help=True)


@app.command("rotate-munge-key")
def rotate_munge_key(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Make a new munge key on the controller, install it on every node and restart munge.

    Runs the slurm stage with munge_rotate_key; its cross-node check proves that a credential
    made on the controller decodes on every node. Jobs being launched during the restart may
    fail to authenticate: rotate in a quiet moment. Asks first unless --yes (no terminal: pass
    --yes). Exit 0 rotated and proven everywhere; 1 a node failed (named); 2 invalid input.

    Example:

        kiln slurm rotate-munge-key inventories/sandbox --yes
    """
    from kiln.plan import PlanOptions, make_plan
    from kiln.runner.execute import execute

    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    stages = tuple(select_stages("slurm"))
    confirm_or_refuse(cluster, list(stages), yes, check=False)
    # The munge role makes the key, copies it everywhere, restarts munge, then proves that a
    # controller credential decodes on every node: the run's result is the report.
    plan = make_plan(cluster, PlanOptions(stages=stages, extravars=ROTATE_EXTRAVARS))
    with cluster_lock(cluster, "slurm rotate-munge-key") as shared, StageDisplay() as display:
        result = execute(plan, listener=display, lock=shared)  # exit 3 naming the holder
    summary = {**result.to_dict(), "rotated": result.ok}
    if json_:
        print_json("slurm-rotate-munge-key", summary)
    else:
        render_summary(result)
    if result.ok:
        err.print(f"munge key rotated on {len(result.hosts)} host(s); a controller "
                  "credential decodes on every node")  # fmt: skip
    else:
        bad = result.failed_hosts + result.unreachable_hosts
        which = safe(", ".join(bad) or "stopped")
        err.print(f"[bold red]munge key rotation incomplete[/]: {which}; "
                  "re-run `kiln slurm rotate-munge-key` once they are fixed")  # fmt: skip
    return result.exit_code
