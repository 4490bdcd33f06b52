"""`kiln facts`: the hardware facts the last preflight run saved, as a table or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from kiln.console import folded, out, print_json, safe
from kiln.errors import EnvironmentProblem
from kiln.records.runs import last_run_with


def _gpus(facts: dict[str, Any]) -> str:
    declared = facts.get("declared", {})
    shown = facts.get("gpu_count", 0)
    text = f"{shown}/{declared.get('gpu_count', 0)} {declared.get('gpu_model', '')}".strip()
    smi = facts.get("nvidia_smi") or {}
    if smi.get("error"):
        return f"{text} (nvidia-smi failed: {smi['error'][:60]})"
    if smi.get("gpus"):
        models = sorted({gpu["product_name"] or "unknown" for gpu in smi["gpus"]})
        text += f" ({smi['gpu_count']}x {', '.join(models)}, driver {smi['driver_version']})"
    return text


def _stack(facts: dict[str, Any]) -> str:
    stack = facts.get("gpu_stack") or {}
    parts = [f"{name} {stack[name]}" for name in ("driver", "cuda", "nccl") if stack.get(name)]
    return ", ".join(parts) or "-"


def _slurm(facts: dict[str, Any]) -> str:
    """The Slurm daemons installed and what their -V says; the declared version where another
    is installed (preflight: the slurm stage replaces an older one, refuses to downgrade)."""
    slurm = facts.get("slurm") or {}
    seen = {name: version for name, version in (slurm.get("seen") or {}).items() if version}
    if not seen:
        return "-"
    text = ", ".join(f"{name} {version}" for name, version in sorted(seen.items()))
    if slurm.get("problems") or slurm.get("notes"):
        text += f" (declared {slurm.get('expected')})"
    return text


def _bmc(facts: dict[str, Any]) -> str:
    if not facts.get("bmc_address"):
        return "-"
    reachable = facts.get("bmc_reachable")
    state = {True: "answers", False: "no answer"}.get(reachable, "not probed")
    return f"{facts['bmc_address']} {state}"


def facts(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    json_: Annotated[bool, typer.Option("--json", help="Print the facts as JSON.")] = False,
) -> int:
    """Print the facts saved by the last preflight run on INVENTORY.

    Example:

        kiln facts inventories/sandbox
    """
    record = last_run_with(inventory, "preflight")
    if record is None:
        raise EnvironmentProblem(
            f"no preflight run recorded for {inventory.resolve()}",
            hint=f"run: kiln provision {inventory} --stages preflight",
        )
    saved = record.read_facts()
    if json_:
        print_json(
            "facts",
            {"run_id": record.run_id, "inventory": str(inventory.resolve()), "hosts": saved},
        )
        return 0
    table = Table(title=f"facts from run {record.run_id}", title_justify="left")
    for column in (
        "host",
        "os",
        "kernel",
        "cpus",
        "memory GiB",
        "GPUs shown/declared",
        "driver, CUDA, NCCL packages",
        "Slurm",
        "IB HCAs",
        "BMC",
    ):
        table.add_column(column)
    for host, item in sorted(saved.items()):
        cells = (
            host,
            str(item.get("os", "")),
            str(item.get("kernel", "")),
            str(item.get("cpus", "")),
            f"{int(item.get('memory_mb', 0)) / 1024:.1f}",
            _gpus(item),
            _stack(item),
            _slurm(item),
            ", ".join(item.get("ib_hcas") or []) or "-",
            _bmc(item),
        )
        table.add_row(*map(safe, cells))  # facts are what the nodes said: data, never markup
    out.print(folded(table))
    return 0
