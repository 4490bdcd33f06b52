"""`kiln fabric topology INVENTORY`: Slurm topology.conf from the fabric ibnetdiscover sees."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kiln.commands._output import output_file, writing
from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import clean, err, print_json, safe
from kiln.errors import ExitCode, InvalidInputError
from kiln.fabric.topology import read_source, topology_from_text
from kiln.inventory import require_valid
from kiln.parsers import ParseError
from kiln.survey.fabric import ibnetdiscover_node, run_ibnetdiscover

app = typer.Typer(help="The InfiniBand fabric: topology.conf from what the fabric reports.")


@app.command("topology")
def topology(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    from_: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="ibnetdiscover output to read ('-': stdin). "
            "Default: run ibnetdiscover on a node over SSH.",
        ),
    ] = None,  # fmt: skip
    node: Annotated[
        str | None,
        typer.Option(
            "--node",
            help="The node to run ibnetdiscover on (default: the first "
            "opensm host, else the first node declaring HCAs).",
        ),
    ] = None,  # fmt: skip
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write topology.conf here instead of stdout."),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Exit 1 when the fabric and the inventory disagree."),
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Write Slurm topology.conf (leaf and upper switches, any depth) from ibnetdiscover output
    and show where the fabric disagrees with the racks and leaf switches the inventory declares.

    Exit 0 on success (1 with --strict when they disagree); 2 on an invalid inventory or
    unreadable input (a file or stdin with no usable ibnetdiscover output). Diagnostics mixed
    into the output (stderr captured with it) are skipped, each named by its line.

    Example:

        kiln fabric topology inventories/example-h100 --from ibnetdiscover.txt -o topology.conf
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    if output is not None:
        output_file(output)  # exit 3 naming it, before ibnetdiscover runs
    if from_ is None:
        target = ibnetdiscover_node(cluster, node)
        err.print(f"running ibnetdiscover on {target.name} ...")
        text, source = run_ibnetdiscover(target), f"ibnetdiscover on {target.name}"
    elif str(from_) == "-":
        text, source = sys.stdin.read(), "ibnetdiscover output on stdin"
    else:
        text, source = read_source(from_), from_.name
    try:
        result = topology_from_text(cluster, text, source)
    except ParseError as error:
        if from_ is None:
            raise  # the node's own answer: the operation failed (exit 1)
        raise InvalidInputError(
            f"{source}: {error}",
            hint="give the standard output of an `ibnetdiscover` that reached the fabric",
        ) from error
    if output is not None:
        with writing(output):
            output.write_text(result.conf)
        err.print(f"wrote {output}")
    if json_:
        print_json("fabric topology", result.to_dict())
    elif output is None:
        sys.stdout.write(clean(result.conf))
    leaves = len(result.topology.leaves())
    hosts = len(result.topology.hosts)
    err.print(f"{result.topology.levels} levels, {leaves} leaves, {hosts} inventory hosts placed")
    for line in result.skipped:
        err.print(f"[yellow]skipped:[/] {safe(source)} {safe(line.describe())}")
    for switch in (s for s in result.topology.switches if not s.guid):
        held = ", ".join(switch.nodes or switch.switches)
        err.print(f"[yellow]kiln added {safe(switch.name)}[/] ({safe(held)}): {safe(switch.note)}")
    for line in result.degraded_links:
        err.print(f"[yellow]degraded link:[/] {safe(line)}")
    if result.unnamed_cas:
        err.print(
            f"[yellow]{len(result.unnamed_cas)} CA(s) show no host name[/] (node description "
            "unset; rdma-ndd sets it): " + safe(", ".join(result.unnamed_cas[:8]))
        )
    for item in result.disagreements:
        err.print(f"[yellow]disagrees:[/] {safe(item.message)}")
    if not result.disagreements:
        err.print("the fabric agrees with the inventory")
    return int(ExitCode.FAILED if strict and result.disagreements else ExitCode.OK)
