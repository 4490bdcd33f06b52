"""`kiln power show INVENTORY`: current power limits, clocks and temperatures per node and GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, folded, out, print_json, safe
from kiln.errors import ExitCode
from kiln.fleet import select_nodes
from kiln.inventory import require_valid
from kiln.power.show import PowerShow
from kiln.survey.power import power_show

app = typer.Typer(help="GPU power and cooling policy.", no_args_is_help=True)


def _num(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:g}{unit}"


def render_table(result: PowerShow) -> None:
    table = Table(title="GPU power, clocks and temperatures", title_justify="left")
    for column in ("node", "GPU", "persistence", "limit W (min-max)", "draw W",
                   "graphics MHz", "memory MHz", "temp C"):  # fmt: skip
        table.add_column(column)
    for node in result.nodes:
        if node.status == "cpu-only":
            table.add_row(node.name, "-", "[dim]CPU-only node: no GPUs[/]", *[""] * 5)
            continue
        if node.status != "ok":
            table.add_row(node.name, "-", f"[bold red]{node.status}[/]: {safe(node.error or '')}",
                          *[""] * 5)  # fmt: skip
            continue
        for gpu in node.gpus:
            persistence = {True: "on", False: "[yellow]off[/]", None: "-"}[gpu.persistence]
            limits = (f"{_num(gpu.power_limit_w)} ({_num(gpu.min_limit_w)}-"
                      f"{_num(gpu.max_limit_w)})")  # fmt: skip
            table.add_row(
                node.name, str(gpu.index), persistence, limits, _num(gpu.power_draw_w),
                f"{_num(gpu.graphics_mhz)}/{_num(gpu.max_graphics_mhz)}",
                f"{_num(gpu.memory_mhz)}/{_num(gpu.max_memory_mhz)}", _num(gpu.temperature_c),
            )  # fmt: skip
    out.print(folded(table))


def show(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    nodes: Annotated[
        str | None,
        typer.Option("--nodes", "-n", help="Hosts, groups or hostlists; default: every node."),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", "-t", min=0.1, help="Seconds per node.")
    ] = 30.0,
    json_: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Power limits, clocks and temperatures of every GPU, read with nvidia-smi over SSH.

    CPU-only nodes are listed as such and not contacted. Exit 0 when every GPU node answered;
    1 when one could not be reached or its answer not read; 2 on an invalid inventory.

    Example:

        kiln power show inventories/example-h100 --nodes gpu001
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    selected = select_nodes(cluster, nodes)
    result = power_show(selected, timeout=timeout)
    if json_:
        print_json("power show", {"inventory": str(inventory.resolve()), **result.to_dict()})
    else:
        render_table(result)
    failed = [node.name for node in result.nodes if node.status not in ("ok", "cpu-only")]
    if failed:
        err.print(f"{len(failed)} node(s) did not answer: {', '.join(failed)}")
    return int(ExitCode.OK if result.ok else ExitCode.FAILED)


app.command("show")(show)
