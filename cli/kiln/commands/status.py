"""`kiln status INVENTORY`: the cluster as Slurm sees it, beside the inventory; with --health,
each compute node's last health result (one SSH round trip per node, only when asked)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, folded, out, print_json, safe
from kiln.inventory import Cluster, require_valid
from kiln.render.hostlist import compress
from kiln.slurmctl import ClusterStatus, cluster_status

STATE_STYLE = {"idle": "green", "mixed": "cyan", "allocated": "cyan", "drained": "yellow",
               "draining": "yellow", "down": "bold red", "not in slurm": "bold red"}  # fmt: skip


def _state(text: str) -> str:
    base = text.split("+")[0].rstrip("*~#!%$@^-")
    return f"[{STATE_STYLE.get(base, 'bold red' if text.endswith('*') else '')}]{safe(text)}[/]"


def last_health(cluster: Cluster, fanout: int, timeout: float) -> dict[str, dict]:
    """Each compute node's last health result (its last.json), read like `kiln health --last`."""
    from kiln.fleet import run_as_root, run_command, select_nodes
    from kiln.health.results import last_cell, node_command

    nodes = select_nodes(cluster, "kiln_compute")
    command = node_command(last=True)
    result = run_as_root(nodes, command, runner=run_command, fanout=fanout, timeout=timeout)
    return {r.name: last_cell(str(r.status), r.stdout, r.stderr) for r in result.results}


def _health(cell: dict | None) -> str:
    if cell is None:
        return "-"
    style = {True: "green", False: "bold red"}.get(cell["ok"], "yellow")
    return f"[{style}]{safe(cell['text'])}[/]"


def lifecycle_states(cluster: Cluster) -> tuple[dict[str, str], str | None]:
    """Each node's lifecycle state from the log beside the cluster's shared state, and a note
    when it could not be read (the column then shows "-": status still answers)."""
    from kiln.errors import KilnError
    from kiln.state.lifecycle import lifecycle_log

    try:
        log = lifecycle_log(cluster)
        try:
            lives = log.lives()
        finally:
            log.close()
    except KilnError as error:
        return {}, f"lifecycle not shown: {error.message}"
    return {node: str(life.state) for node, life in lives.items()}, None


def render_table(
    status: ClusterStatus,
    health: dict[str, dict] | None = None,
    lifecycle: dict[str, str] | None = None,
) -> None:
    counts = ", ".join(f"{len(names)} {state}" for state, names in status.by_state().items())
    table = Table(
        title=f"{status.cluster} via {status.controller}: {counts or 'no node'}",
        title_justify="left",
    )
    columns = ["node", "state", "lifecycle", "GPUs (Gres/declared)", "reason", "last burn-in"]
    lifecycle = lifecycle or {}
    for column in [*columns, *(["last health"] if health is not None else []), "flag"]:
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
        life = safe(lifecycle.get(row.name, "-"))
        cells = (safe(row.name), _state(row.state), life, gpus, safe(reason),
                 safe(row.burnin.text()))  # fmt: skip
        if health is not None:
            cells = (*cells, _health(health.get(row.name)))
        table.add_row(*cells, flag)
    out.print(folded(table))


def status(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    json_: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
    health: Annotated[
        bool,
        typer.Option(
            "--health",
            help="Also read each compute node's last health result over SSH (kiln health --last).",
        ),
    ] = False,
    fanout: Annotated[int, typer.Option("--fanout", "-f", min=1, help="With --health.")] = 64,
    timeout: Annotated[
        float, typer.Option("--timeout", "-t", min=0.1, help="With --health: seconds per node.")
    ] = 30.0,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Nodes by Slurm state beside their lifecycle state (kiln funnel), drain reasons (who,
    when, why), GPUs per node from Gres and the last burn-in verdict; nodes known to only one
    of the inventory and Slurm are flagged, and so is a burn-in that never finished (killed:
    its reservation and jobs are left). --health adds each compute node's last health result
    (its last.json over SSH, like kiln health --last); without it, status asks the controller
    only.

    Exit 0 when Slurm answered (whatever the nodes' states); 1 when the controller could not be
    asked; 2 on an invalid inventory.

    Example:

        kiln status inventories/sandbox
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    result = cluster_status(cluster)
    cells = last_health(cluster, fanout, timeout) if health else None
    lifecycle, unread_lifecycle = lifecycle_states(cluster)
    if json_:
        document = {"inventory": str(inventory.resolve()), **result.to_dict()}
        for node in document["nodes"]:
            node["lifecycle"] = lifecycle.get(node["name"])
            if cells is not None:
                node["health"] = cells.get(node["name"])
        print_json("status", document)
    else:
        render_table(result, cells, lifecycle)
    if unread_lifecycle:
        err.print(f"[yellow]{safe(unread_lifecycle)}[/]")
    if result.flagged:
        err.print(f"{len(result.flagged)} node(s) flagged: inventory and Slurm disagree")
    for leftover in result.unfinished:  # its nodes hold their drains; the reservation lingers
        err.print(
            f"[yellow]unfinished burn-in[/]: {safe(leftover.describe())}; "
            "the next `kiln burnin` undoes it"
        )
    if cells is not None:
        unhealthy = sorted(name for name, cell in cells.items() if cell["ok"] is False)
        unread = sorted(name for name, cell in cells.items() if cell["ok"] is None)
        if unhealthy:
            err.print(f"{len(unhealthy)} node(s) unhealthy at their last check: "
                      + safe(compress(unhealthy)))  # fmt: skip
        if unread:
            err.print(f"{len(unread)} node(s) without a last health result: "
                      + safe(compress(unread)))  # fmt: skip
    return 0
