"""`kiln burnin INVENTORY`: GEMM, all-reduce and InfiniBand rails through Slurm, judged, failing
nodes drained."""

from __future__ import annotations

import shutil
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kiln.burnin.campaign import BurninOptions, run_burnin
from kiln.console import err, out, print_json
from kiln.errors import ExitCode
from kiln.inventory import require_valid
from kiln.report import render, render_table


class Suite(StrEnum):
    quick = "quick"
    standard = "standard"
    soak = "soak"


class Format(StrEnum):
    table = "table"
    json = "json"
    junit = "junit"
    html = "html"


def burnin(
    inventory: Annotated[Path, typer.Argument(help="Inventory directory.")],
    suite: Annotated[
        Suite | None,
        typer.Option("--suite", "-s", help="quick | standard | soak (default: kiln_burnin.suite)."),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option("--nodes", "-n", help="Compute nodes to test: names, groups, gpu[001-040]."),
    ] = None,
    hours: Annotated[
        float | None,
        typer.Option("--hours", min=0.01, help="Soak duration (default kiln_burnin.soak_hours)."),
    ] = None,
    seconds: Annotated[
        float | None,
        typer.Option("--seconds", min=1, help="Override the suite's GEMM duration per node."),
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output on stdout.")] = Format.table,
    json: Annotated[bool, typer.Option("--json", help="One versioned JSON document.")] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Also copy report.json/.xml/.html into this folder."),
    ] = None,
    no_drain: Annotated[
        bool,
        typer.Option("--no-drain", help="Judge only: leave every node's Slurm state as it was."),
    ] = False,
    skip_runtime: Annotated[
        bool,
        typer.Option("--skip-runtime", help="Do not run the burnin stage (runtime in place)."),
    ] = False,
) -> int:
    """Run burn-in through Slurm on the compute nodes, judge it, drain what fails.

    Per node (a job array): GEMM on every device (BF16 on GPUs, FP32 on CPU-only nodes) and,
    on GPU nodes, an all-reduce inside the node; across the nodes: an all-reduce with the ring
    forced (NCCL, or gloo on CPU-only nodes), and a pairwise pass when it misses its floor; on
    nodes that declare InfiniBand HCAs, ib_write_bw between node pairs on every rail and the
    ports' error counters before and after.
    Everything runs inside a maintenance reservation; failing nodes are drained with the
    reason ("kiln: ..."), passing nodes kiln had drained are resumed. The run record
    (report.json, report.xml JUnit, report.html) is re-rendered by `kiln report RUN`.

    Exit 0 every check passed, 1 failures, 2 invalid input, 3 environment, 130 interrupted.
    """
    cluster = require_valid(inventory)
    start = time.monotonic()

    def progress(message: str) -> None:
        err.print(f"[dim]{time.monotonic() - start:6.1f}s[/] {message}")

    options = BurninOptions(
        suite=suite.value if suite else None,
        nodes=nodes,
        hours=hours,
        gemm_seconds=seconds,
        drain=not no_drain,
        install=not skip_runtime,
    )
    outcome = run_burnin(cluster, options, progress=progress)
    report = outcome.report
    for node, reason in outcome.drained.items():
        err.print(f"[bold red]drained[/] {node}: {reason}")
    for node in outcome.resumed:
        err.print(f"[green]resumed[/] {node}")
    if output is not None:
        output.mkdir(parents=True, exist_ok=True)
        for name in ("report.json", "report.xml", "report.html"):
            shutil.copy2(outcome.run_dir / name, output / name)
    err.print(
        f"burn-in {outcome.suite.name} on {len(outcome.nodes)} node(s) in "
        f"{outcome.timings.get('total', 0):.0f}s: "
        + ("[green]passed[/]" if report.passed else f"[red]{len(report.failures)} failed[/]")
        + f"; run record {outcome.run_dir}"
    )
    if json or fmt is Format.json:
        print_json("burnin", outcome.to_dict())
    elif fmt is Format.table:
        out.print(render_table(report))
    else:
        sys.stdout.write(render(report, fmt.value))
        sys.stdout.flush()
    return int(ExitCode.OK if report.passed else ExitCode.FAILED)
