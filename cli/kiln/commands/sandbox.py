"""`kiln sandbox up|down|status`: local Docker containers that kiln provisions over SSH."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kiln.commands._progress import HEARTBEAT_S, stamp
from kiln.console import err, folded, out, print_json, safe
from kiln.sandbox import config, lifecycle, releases

app = typer.Typer(
    help="The local sandbox: Docker containers that behave like bare-metal servers.",
    no_args_is_help=True,
)


def plain_progress(clock=time.monotonic, wall=time.time, every: float = HEARTBEAT_S / 2):
    """Timestamped step lines; detail lines (a build's output, its heartbeat) at most one per
    `every` seconds, so a log shows progress without every line of apt (and, with the build's
    beat of the same period, a log line at least every 10 s)."""
    last = [float("-inf")]

    def plain(message: str, *, detail: bool = False) -> None:
        now = clock()
        if detail and now - last[0] < every:
            return
        last[0] = now
        err.print(f"{stamp(wall)} {'  ' if detail else ''}{safe(message)}")

    return plain


@contextmanager
def _progress():
    """A progress callback for the core: a spinner on a TTY, plain step lines otherwise."""
    if not err.is_terminal:
        yield plain_progress()
        return
    with err.status("starting") as status:

        def live(message: str, *, detail: bool = False) -> None:
            status.update(safe(message))
            if not detail:
                err.print(f"[dim]{safe(message)}[/]")

        yield live


@app.command("up")
def up(
    nodes: Annotated[
        int, typer.Option("--nodes", "-n", help="Compute nodes besides kiln-ctl.")
    ] = 2,
    os_: Annotated[
        str | None,
        typer.Option(
            "--os",
            envvar=releases.ENV,
            show_default=False,
            help=f"The nodes' Debian release: {', '.join(releases.RELEASES)} "
            f"[default: {releases.DEFAULT}]. Running nodes of another release are replaced.",
        ),
    ] = None,
    rebuild: Annotated[bool, typer.Option(help="Rebuild the node image even if cached.")] = False,
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--mirror",
            metavar="BUNDLE",
            help="Air-gapped: no route out, and a mirror container serving BUNDLE "
            "(kiln mirror fetch's); the inventory sets kiln_mirror to it.",
        ),
    ] = None,
) -> None:
    """Start (or reuse) the sandbox, trust it over SSH, write its inventory; print its path.

    The nodes run Debian 13 and its Slurm 24.11 unless --os debian-12 (Slurm 22.05) is given.
    With --mirror BUNDLE the sandbox's network has no route out and every artifact comes from
    the bundle through the mirror container (its access log: docker logs INSTANCE-mirror);
    run it beside the default one with KILN_SANDBOX=name.

    Example:

        kiln sandbox up --nodes 2
    """
    release = releases.chosen(os_)
    with _progress() as progress:
        result = lifecycle.up(nodes, config.paths(), progress, release=release, rebuild=rebuild,
                              bundle=bundle)  # fmt: skip
    for node in result.nodes:
        err.print(f"  {node.name:<12} {node.address:<15} {node.action:<9} systemd {node.systemd}")
    for name in result.removed:
        err.print(f"  {name:<12} removed")
    err.print(
        f"{result.release.name} sandbox up in {result.seconds:.1f}s; ssh with host key "
        "checking works to every node"
    )
    out.print(str(result.inventory_dir))


@app.command("down")
def down() -> None:
    """Remove the sandbox containers and network, and any light hosts a benchmark left (the
    image and SSH keys stay).

    Example:

        kiln sandbox down
    """
    result = lifecycle.down()
    names = ", ".join(result.removed) or "no containers"
    err.print(f"removed {names}" + ("; network removed" if result.network_removed else ""))


@app.command("status")
def status(
    json_: Annotated[bool, typer.Option("--json", help="One versioned JSON document.")] = False,
) -> None:
    """Each sandbox container: name, address, container state, systemd state.

    Example:

        kiln sandbox status --json
    """
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
    out.print(folded(table))
