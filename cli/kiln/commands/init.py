"""`kiln init --example --nodes N DIR`: write an example inventory to start from."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiln.console import err
from kiln.errors import InvalidInputError
from kiln.examples import write_example


def init(
    directory: Annotated[Path, typer.Argument(help="Directory to write the inventory into.")],
    example: Annotated[
        bool,
        typer.Option(
            "--example",
            help="Write the realistic 8x H100 SXM example (the only template so far).",
        ),
    ] = False,
    nodes: Annotated[
        int, typer.Option("--nodes", min=1, max=100_000, help="Compute nodes (8 GPUs each).")
    ] = 128,
    name: Annotated[str, typer.Option("--name", help="kiln_cluster_name.")] = "example",
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
) -> int:
    """Write a starting inventory: one controller and N 8x H100 nodes in racks of 32.

    Example:

        kiln init mycluster --example --nodes 4
    """
    if not example:
        raise InvalidInputError("say which inventory to write", hint="pass --example")
    if directory.exists() and any(directory.iterdir()) and not force:
        raise InvalidInputError(
            f"{directory} is not empty; nothing was written",
            hint="pick an empty directory or pass --force",
        )
    written = write_example(directory, nodes, name)
    err.print(f"wrote {len(written)} files for {nodes} nodes ({nodes * 8} GPUs) to {directory}")
    print(directory)
    return 0
