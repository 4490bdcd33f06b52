"""`kiln triage` and `kiln rma`: an operator moves a failed node on the way back to service,
with a note; `kiln rma --bundle DIR` also writes what the vendor asks for."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, print_json, safe
from kiln.errors import InvalidInputError

if TYPE_CHECKING:  # the inventory model is not on the path of --help
    from kiln.inventory import Cluster

NOTE_HELP = "Why, in a line (kept in the lifecycle log with the time and your name)."


def mark(
    inventory: Path, node: str, to: str, note: str, vault: tuple, json_: bool
) -> tuple[Cluster, list[dict]]:
    """Append the operator's events under the cluster's lock; the cluster and the node's
    history after them. Nothing is written when the lifecycle forbids the move (exit 2)."""
    import getpass

    from kiln.commands._lock import cluster_lock
    from kiln.inventory import require_valid
    from kiln.lifecycle import State
    from kiln.lifecycle.derive import by_operator

    cluster = require_valid(inventory, use_vault(*vault))
    if node not in {n.name for n in cluster.compute}:
        raise InvalidInputError(
            f"{node} is not a compute node of {inventory}",
            hint="name a host of the kiln_compute group (kiln status lists them)",
        )
    if not note.strip() or "\n" in note:
        raise InvalidInputError("--note must be one line of text", hint="say why, in a line")
    with cluster_lock(cluster, to, read=False) as shared:
        log = shared.lifecycle_log()
        lives = log.lives()
        who = getpass.getuser()
        events = by_operator(lives, node, State(to), f"{to} by {who}: {note.strip()}", time.time())
        log.append(events)
        for event in events:
            lives[node].move(event)
    for event in events:
        err.print(f"{safe(node)}: {safe(str(event.to))} ({safe(log.where)})")
    life = lives[node].to_dict()
    if json_:
        print_json(to, life)
    return cluster, life["history"]


Node = Annotated[str, typer.Argument(help="The compute node.", show_default=False)]
Note = Annotated[str, typer.Option("--note", "-n", help=NOTE_HELP, show_default=False)]
Json = Annotated[bool, typer.Option("--json", help="The node's lifecycle history as JSON.")]
Inventory = Annotated[Path, typer.Argument(help="The inventory directory.")]


def triage(
    inventory: Inventory,
    node: Node,
    note: Note,
    json_: Json = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Mark a failed node as under triage (someone is finding the fault), with a note.

    Only a failed node goes to triage (a burn-in failed it). From triage it goes to
    `kiln rma`, or back through quarantined to service when a burn-in passes it again.
    Exit 0; 2 for an unknown node or a move the lifecycle forbids (nothing written); 3 when the
    cluster's lock or shared state cannot be reached, or was written by a newer kiln.

    Example:

        kiln triage inventories/prod gpu0042 --note "xid 79 twice; reseating GPU 3"
    """
    mark(inventory, node, "triage", note, (vault_id, vault_password_file), json_)
    return 0


def rma(
    inventory: Inventory,
    node: Node,
    note: Note,
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--bundle",
            show_default=False,
            help="Also write the vendor's bundle to this new directory: serials, facts, failing "
            "verdicts with their measurements, health, Xid lines, BMC sensors and event log.",
        ),
    ] = None,
    json_: Json = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Mark a failed node (or one under triage) as returned to its vendor, with a note.

    The node stays drained. When it comes back with new parts, the next provision sees its
    serials changed: it is recorded as replaced, quarantined, and burned in again before it
    runs jobs. Exit 0; 2 for an unknown node, a move the lifecycle forbids (an RMA of a node
    in service) or a --bundle directory that is not empty (nothing written); 3 when the
    cluster's lock or shared state cannot be reached, or was written by a newer kiln.

    Example:

        kiln rma inventories/prod gpu0042 --note "GPU 3 fell off the bus" --bundle rma-gpu0042
    """
    if bundle is not None and bundle.exists() and any(bundle.iterdir()):
        raise InvalidInputError(f"--bundle {bundle} is not empty", hint="name a new directory")
    cluster, history = mark(inventory, node, "rma", note, (vault_id, vault_password_file), json_)
    if bundle is not None:
        from kiln.survey.rma import write_bundle

        result = write_bundle(cluster, node, bundle, history=history)
        for part in result.parts:
            said = "[green]ok[/]" if part.ok else f"[yellow]not collected[/]: {safe(part.detail)}"
            err.print(f"  {safe(part.name)}: {said}")
        err.print(f"bundle for {safe(node)} in {safe(str(bundle))}")
    return 0
