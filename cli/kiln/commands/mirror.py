"""`kiln mirror`: what an air-gapped site must bring in before a provision and a burn-in."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, print_json, safe
from kiln.inventory import require_valid
from kiln.artifacts.plan import mirror_plan

app = typer.Typer(no_args_is_help=True, help="What an air-gapped site must mirror.")


@app.command("plan")
def plan(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    json_: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Every artifact a provision and a burn-in of INVENTORY fetch: one line per artifact, its
    kind (deb, rpm, wheel, file, repository, key), name, exact version where a role pins one
    ("-": the repository's current one), OS release and architecture, source, checksum, and
    the task that fetches it. Derived from the roles themselves, walked with each kind of
    node's variables: a new package in a role is a new line here. An artifact whose name or
    version only the node can say (its kernel, what it has installed) says so ("unresolved");
    one fetched only under a condition the node decides says which ("when").

    Exit 0 with the plan printed; 2 on an invalid inventory.

    Example:

        kiln mirror plan inventories/example-h100 --json > mirror-plan.json
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    result = mirror_plan(cluster)
    if json_:
        print_json("mirror-plan", result.to_dict())
    else:
        for line in result.lines():
            typer.echo(line)
    unresolved = result.unresolved
    err.print(
        f"{len(result.artifacts)} artifacts for {safe(', '.join(result.platforms))}"
        + (f"; {len(unresolved)} need the node to resolve them" if unresolved else "")
    )
    return 0
