"""`kiln inspect INVENTORY NODE`: declared hardware beside what the node shows now."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, folded, out, print_json, safe
from kiln.errors import ExitCode, InvalidInputError
from kiln.fleet import select_nodes
from kiln.inventory import require_valid
from kiln.slurmctl import Inspection, inspect_node

MARK = {True: "[green]ok[/]", False: "[bold red]DIFFERS[/]", None: ""}


def render_table(found: Inspection) -> None:
    table = Table(title=safe(f"{found.node} ({found.address})"), title_justify="left")
    for column in ("", "declared (inventory)", "shown now", "match"):
        table.add_column(column)
    for row in found.rows:
        shown = f"[bold red]{safe(row.shown)}[/]" if row.match is False else safe(row.shown)
        table.add_row(safe(row.item), safe(row.declared), shown, MARK[row.match])
    out.print(folded(table))


def inspect(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    node: Annotated[str, typer.Argument(help="One node of the inventory.", show_default=False)],
    json_: Annotated[bool, typer.Option("--json", help="Print the inspection as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """GPUs (nvidia-smi, else a PCI scan), HCAs, driver, power limits, Slurm state and reason and
    the last burn-in verdict, beside what the inventory declares; differences are marked.

    Exit 0 when the node matches its declaration; 1 when something differs or the node cannot
    be reached; 2 on invalid input.

    Example:

        kiln inspect inventories/sandbox kiln-node01
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    selected = select_nodes(cluster, node)
    if len(selected) != 1:
        raise InvalidInputError(
            f"{node!r} selects {len(selected)} nodes; inspect takes one",
            hint="name one host; `kiln status` shows many",
        )
    found = inspect_node(cluster, selected[0])
    if json_:
        print_json("inspect", {"inventory": str(inventory.resolve()), **found.to_dict()})
    else:
        render_table(found)
    if not found.reachable:
        err.print(f"[bold red]{safe(found.node)} could not be probed:[/] {safe(found.error)}")
    elif found.differences:
        names = ", ".join(row.item for row in found.differences)
        err.print(f"{safe(found.node)}: differs from the inventory in {safe(names)}")
    return int(ExitCode.OK if found.ok else ExitCode.FAILED)
