"""`kiln resume INVENTORY NODES`: return nodes drained with `kiln drain` to service."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiln.commands._lock import cluster_lock
from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.commands.drain import NODES_HELP, render
from kiln.fleet import select_nodes
from kiln.inventory import require_valid
from kiln.slurmctl import resume as resume_nodes


def resume(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    nodes: Annotated[str, typer.Argument(help=NODES_HELP, show_default=False)],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also resume nodes drained for any other reason: a quarantine or failed "
            "burn-in (untested or failing nodes), a maintenance, someone else's drain.",
        ),
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="Per-node results as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Resume nodes drained with `kiln drain` (reason `kiln:operator:USER: ...`, or the older
    `kiln: TEXT (by USER)`); nodes not drained are left as is.

    Any other drain is refused, naming who drained it, when and why, unless --force: a
    quarantined or burn-in-failed node is resumed by a burn-in it passes, a maintenance drain by
    the run that placed it.

    Exit 0 when every selected node is available or resumed; 1 when one was refused, is
    unknown to Slurm or did not resume; 2 on invalid input.

    Example:

        kiln resume inventories/sandbox kiln-node01
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    selected = select_nodes(cluster, nodes)
    with cluster_lock(cluster, "resume", read=False):  # exit 3 naming the holder if locked
        result = resume_nodes(cluster, selected, force=force)
    return render(result, inventory, json_)
