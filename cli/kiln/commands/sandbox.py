"""`kiln sandbox up|down|status`: local Docker containers that kiln provisions over SSH."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from kiln.console import err, out, print_json
from kiln.sandbox import config, lifecycle

app = typer.Typer(
    help="The local sandbox: Docker containers that behave like bare-metal servers.",
    no_args_is_help=True,
)


@contextmanager
def _progress():
    """A progress callback for the core: a spinner on a TTY, plain step lines otherwise."""
    if not err.is_terminal:

        def plain(message: str, *, detail: bool = False) -> None:
            if not detail:
                err.print(message)

        yield plain
        return
    with err.status("starting") as status:

        def live(message: str, *, detail: bool = False) -> None:
            status.update(message)
            if not detail:
                err.print(f"[dim]{message}[/]")

        yield live


@app.command("up")
def up(
    nodes: Annotated[
        int, typer.Option("--nodes", "-n", help="Compute nodes besides kiln-ctl.")
    ] = 2,
    rebuild: Annotated[bool, typer.Option(help="Rebuild the node image even if cached.")] = False,
) -> None:
    """Start (or reuse) the sandbox, trust it over SSH, write its inventory; print its path."""
    with _progress() as progress:
        result = lifecycle.up(nodes, config.paths(), progress, rebuild=rebuild)
    for node in result.nodes:
        err.print(f"  {node.name:<12} {node.address:<15} {node.action:<9} systemd {node.systemd}")
    for name in result.removed:
        err.print(f"  {name:<12} removed")
    err.print(
        f"sandbox up in {result.seconds:.1f}s; ssh with host key checking works to every node"
    )
    out.print(str(result.inventory_dir))


@app.command("down")
def down() -> None:
    """Remove the sandbox containers and network (the image and SSH keys stay)."""
    result = lifecycle.down()
    names = ", ".join(result.removed) or "no containers"
    err.print(f"removed {names}" + ("; network removed" if result.network_removed else ""))


@app.command("status")
def status(
    json_: Annotated[bool, typer.Option("--json", help="One versioned JSON document.")] = False,
) -> None:
    """Each sandbox container: name, address, container state, systemd state."""
    rows = lifecycle.status()
    if json_:
        print_json("sandbox-status", {"nodes": [asdict(row) for row in rows]})
        return
    if not rows:
        err.print("no sandbox containers (start them with `kiln sandbox up`)")
        return
    table = Table("name", "address", "state", "systemd", box=None)
    for row in rows:
        table.add_row(row.name, row.address, row.state, row.systemd)
    out.print(table)
