"""`kiln validate INVENTORY`: every finding at once, with file:line; nothing is touched."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, out, print_json, safe
from kiln.errors import ExitCode
from kiln.inventory import LoadResult, RecordedSlurm, format_finding, load_cluster
from kiln.records.runs import last_run_with


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


def recorded_slurm(inventory: Path) -> RecordedSlurm | None:
    """The Slurm daemons' versions the last preflight run on `inventory` read (its facts), for
    the rule that refuses a declared Slurm the nodes cannot be upgraded to in place."""
    record = last_run_with(inventory, "preflight")
    if record is None:
        return None
    versions = {
        host: dict((facts.get("slurm") or {}).get("seen") or {})
        for host, facts in record.read_facts().items()
        if isinstance(facts, dict)
    }
    return RecordedSlurm(record.run_id, versions)


def validate(
    inventory: Annotated[Path, typer.Argument(help="Ansible inventory directory (or file).")],
    json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Check an inventory: report every problem at once, each with file:line and a fix.

    Exit 0 when it is clean (warnings allowed), 2 on any error. Where a provision ran on
    INVENTORY before, the declared Slurm is also judged against the versions its preflight read
    on the nodes (no downgrade, no upgrade beyond Slurm's window).

    Example:

        kiln validate inventories/example-h100
    """
    vault = use_vault(vault_id, vault_password_file)
    result = load_cluster(inventory, vault, recorded_slurm(inventory))
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
