"""`kiln status INVENTORY`: the cluster as Slurm sees it, beside the inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, out, print_json, safe
from kiln.inventory import require_valid
from kiln.slurmctl import ClusterStatus, cluster_status

STATE_STYLE = {"idle": "green", "mixed": "cyan", "allocated": "cyan", "drained": "yellow",
               "draining": "yellow", "down": "bold red", "not in slurm": "bold red"}  # fmt: skip


def _state(text: str) -> str:
    base = text.split("+")[0].rstrip("*~#!%$@^-")
    return f"[{STATE_STYLE.get(base, 'bold red' if text.endswith('*') else '')}]{safe(text)}[/]"


def render_table(status: ClusterStatus) -> None:
    counts = ", ".join(f"{len(names)} {state}" for state, names in status.by_state().items())
    table = Table(
        title=f"{status.cluster} via {status.controller}: {counts or 'no node'}",
        title_justify="left",
    )
    for column in ("node", "state", "GPUs (Gres/declared)", "reason", "last burn-in", "flag"):
        table.add_column(column)
    for row in status.rows:
        slurm = row.slurm
        reason = "-"
        if slurm is not None and slurm.drained:
            reason = slurm.describe_drain().split(" ", 1)[1]  # "by root at ...: why"
        elif slurm is not None and slurm.reason:
            reason = slurm.reason
        declared = "-" if row.declared_gpus is None else row.declared_gpus
        gpus = f"{slurm.gpus if slurm else '-'}/{declared}"
        flag = f"[bold red]{safe(row.flag)}[/]" if row.flag else ""
        cells = (safe(row.name), _state(row.state), gpus, safe(reason), safe(row.burnin.text()))
        table.add_row(*cells, flag)
    out.print(table)


def status(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    json_: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Nodes by Slurm state, drain reasons (who, when, why), GPUs per node from Gres and the last
    burn-in verdict; nodes known to only one of the inventory and Slurm are flagged.

    Exit 0 when Slurm answered (whatever the nodes' states); 1 when the controller could not be
    asked; 2 on an invalid inventory.
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    result = cluster_status(cluster)
    if json_:
        print_json("status", {"inventory": str(inventory.resolve()), **result.to_dict()})
    else:
        render_table(result)
    if result.flagged:
        err.print(f"{len(result.flagged)} node(s) flagged: inventory and Slurm disagree")
    return 0
