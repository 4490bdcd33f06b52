"""`kiln health INVENTORY`: kiln's node health check on demand, over SSH, answers folded."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import clean, err, print_json, safe
from kiln.errors import ExitCode
from kiln.fleet import fold_results, render_text, run_as_root, run_command, select_nodes, summary
from kiln.health.results import node_command, node_entry
from kiln.inventory import require_valid


def health(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    nodes: Annotated[
        str | None,
        typer.Option(
            "--nodes",
            "-n",
            help="Hosts, groups, hostlists, globs, !exclusions. Default: every compute node.",
        ),
    ] = None,  # fmt: skip
    last: Annotated[
        bool, typer.Option("--last", help="Show the last result Slurm's own run left instead.")
    ] = False,
    fanout: Annotated[int, typer.Option("--fanout", "-f", min=1)] = 64,
    timeout: Annotated[float, typer.Option("--timeout", "-t", min=0.1)] = 60.0,
    json_: Annotated[bool, typer.Option("--json", help="Per-node results as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Run the node health check on the compute nodes (report only: nothing changes in Slurm)
    and print the answers folded by hostlist; --last shows each node's last periodic result.

    Exit 0 when every node is healthy; 1 when any is not, or does not answer; 2 on an invalid
    inventory or a selector that matches nothing.

    Example:

        kiln health inventories/sandbox --nodes kiln-node01
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    selected = select_nodes(cluster, nodes or "kiln_compute")
    command = node_command(last=last, json_=json_)
    result = run_as_root(selected, command, runner=run_command, fanout=fanout, timeout=timeout)
    entries = [node_entry(r.name, str(r.status), r.exit_code, r.stdout) for r in result.results]
    healthy = all(entry["ok"] for entry in entries)
    if json_:
        print_json("health", {
            "inventory": str(inventory.resolve()), "nodes_selector": nodes, "last": last,
            "duration": round(result.duration, 3), "ok": healthy,
            "counts": {"healthy": sum(e["ok"] for e in entries),
                       "unhealthy": sum(not e["ok"] for e in entries),
                       "could_not_check": sum(bool(e["unchecked"]) for e in entries)},
            "nodes": entries,
        })  # fmt: skip
    else:
        folds, problems = fold_results(result.results)
        sys.stdout.write(clean(render_text(folds, problems)))  # remote output is data
        sys.stdout.flush()
    err.print(safe(summary(result)))
    return int(ExitCode.OK if healthy else ExitCode.FAILED)
