"""`kiln resume INVENTORY NODES`: return nodes kiln drained to service."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiln.commands.drain import NODES_HELP, render
from kiln.fleet import select_nodes
from kiln.inventory import require_valid
from kiln.slurmctl import resume as resume_nodes


def resume(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    nodes: Annotated[str, typer.Argument(help=NODES_HELP, show_default=False)],
    force: Annotated[
        bool,
        typer.Option("--force", help="Also resume nodes drained by someone else (not kiln)."),
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="Per-node results as JSON.")] = False,
) -> int:
    """Resume drained nodes whose reason starts with `kiln:`; nodes not drained are left as is.

    A node drained by someone else is refused, naming who drained it, when and why, unless
    --force. Exit 0 when every selected node is available or resumed; 1 when one was refused,
    is unknown to Slurm or did not resume; 2 on invalid input.
    """
    cluster = require_valid(inventory)
    selected = select_nodes(cluster, nodes)
    result = resume_nodes(cluster, selected, force=force)
    return render(result, inventory, json_)
