"""`kiln validate INVENTORY`: every finding at once, with file:line; nothing is touched."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, out, print_json, safe
from kiln.errors import ExitCode
from kiln.inventory import LoadResult, format_finding, load_cluster


def render(result: LoadResult) -> None:
    for finding in result.findings:
        colour = "red" if finding.level == "error" else "yellow"
        text = format_finding(finding, result.path)
        where, _, rest = text.partition(": ")
        err.print(f"[bold]{safe(where)}[/]: [{colour}]{safe(rest)}[/]")
    if result.ok:
        cluster = result.cluster
        out.print(
            f"{result.path}: valid: cluster '{cluster.name}', {len(cluster.controllers)} "
            f"controller(s), {len(cluster.compute)} compute nodes, {cluster.gpu_total} GPUs, "
            f"{len(result.warnings)} warning(s)"
        )
    else:
        err.print(
            f"{len(result.errors)} error(s), {len(result.warnings)} warning(s); nothing was touched"
        )


def validate(
    inventory: Annotated[Path, typer.Argument(help="Ansible inventory directory (or file).")],
    json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Check an inventory: report every problem at once, each with file:line and a fix.

    Exit 0 when it is clean (warnings allowed), 2 on any error.

    Example:

        kiln validate inventories/example-h100
    """
    result = load_cluster(inventory, use_vault(vault_id, vault_password_file))
    if json:
        cluster = result.cluster
        print_json(
            "validate",
            {
                "inventory": str(result.path),
                "valid": result.ok,
                "errors": len(result.errors),
                "warnings": len(result.warnings),
                "findings": [f.to_dict(result.path) for f in result.findings],
                "cluster": None
                if cluster is None
                else {
                    "name": cluster.name,
                    "controllers": [n.name for n in cluster.controllers],
                    "compute_nodes": len(cluster.compute),
                    "gpus": cluster.gpu_total,
                    "versions": cluster.versions.model_dump(),
                },
            },
        )
    else:
        render(result)
    return int(ExitCode.OK if result.ok else ExitCode.INVALID_INPUT)
