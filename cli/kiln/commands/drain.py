"""`kiln drain INVENTORY NODES --reason TEXT`: take nodes out of scheduling through scontrol."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kiln.commands._lock import cluster_lock
from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, folded, out, print_json, safe
from kiln.errors import ExitCode
from kiln.fleet import select_nodes
from kiln.inventory import require_valid
from kiln.slurmctl import OpResult
from kiln.slurmctl import drain as drain_nodes
from kiln.slurmctl.commands import REASON_TEXT_MAX

NODES_HELP = "Hosts, groups, hostlists (gpu[001-040]), globs, !exclusions, comma-separated."
ACTION_STYLE = {"refused": "bold red", "failed": "bold red", "unknown": "yellow", "kept": "yellow"}


def render(result: OpResult, inventory: Path, json_: bool) -> int:
    """Print an OpResult (shared with `kiln resume`); the exit code: 0 all ok, 1 otherwise."""
    if json_:
        print_json(result.operation, {"inventory": str(inventory.resolve()), **result.to_dict()})
    else:
        table = Table(
            title=f"kiln {result.operation} via {result.controller}", title_justify="left"
        )
        for column in ("node", "before", "after", "action", "detail"):
            table.add_column(column)
        for change in result.nodes:
            style = ACTION_STYLE.get(change.action, "green" if change.ok else "bold red")
            table.add_row(
                safe(change.name),
                safe(change.before.state if change.before else "-"),
                safe(change.after.state if change.after else "-"),
                f"[{style}]{change.action}[/]",
                safe(change.message),
            )
        out.print(folded(table))
    counts = ", ".join(f"{n} {action}" for action, n in sorted(result.counts().items()))
    err.print(
        f"{result.operation}: {counts}"
        + safe(f"; reason {result.reason!r}" if result.reason else "")
    )
    return int(ExitCode.OK if result.ok else ExitCode.FAILED)


def drain(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    nodes: Annotated[str, typer.Argument(help=NODES_HELP, show_default=False)],
    reason: Annotated[
        str,
        typer.Option(
            "--reason",
            "-r",
            show_default=False,
            help=f"Why (one line, at most {REASON_TEXT_MAX} characters); stored as "
            "`kiln:operator:USER: TEXT`.",
        ),
    ],  # fmt: skip
    json_: Annotated[bool, typer.Option("--json", help="Per-node results as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Drain nodes in Slurm with an operator reason; running jobs finish first (state draining).

    A node already drained for another reason (a quarantine, a failed burn-in, a maintenance,
    someone else's drain) keeps that reason; `kiln resume` lifts only these operator drains.

    Exit 0 when every selected node is drained or draining; 1 when a node is unknown to Slurm
    or the update failed; 2 on invalid input (bad reason, selector matching nothing): nothing
    was touched.

    Example:

        kiln drain inventories/sandbox kiln-node01 --reason "replace DIMM B2"
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    selected = select_nodes(cluster, nodes)
    with cluster_lock(cluster, "drain", read=False):  # exit 3 naming the holder if locked
        result = drain_nodes(cluster, selected, reason)
    return render(result, inventory, json_)
