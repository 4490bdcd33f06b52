"""`kiln burnin INVENTORY`: GEMM, all-reduce and InfiniBand rails through Slurm, judged, failing
nodes drained.

The command composes the steps: install the runtime (the `burnin` stage through kiln's engine),
run the campaign (kiln.burnin: reserve, submit, collect, judge, drain), render the reports.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kiln.burnin import BurninOptions, BurninOutcome, run_burnin, select_target
from kiln.burnin.campaign import Progress
from kiln.burnin.jobs import Paths
from kiln.commands._output import output_dir, writing
from kiln.commands._progress import StageDisplay
from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, out, print_json, safe
from kiln.errors import ExitCode, OperationFailed
from kiln.inventory import Cluster, require_valid
from kiln.judging import BurninReport
from kiln.plan.stages import BURNIN
from kiln.records.burnin import write_timings
from kiln.report import render, render_table
from kiln.state.backend import push_verdicts
from kiln.state.lifecycle import record_burnin

if TYPE_CHECKING:
    from kiln.runner.hold import Hold


class Suite(StrEnum):
    quick = "quick"
    standard = "standard"
    soak = "soak"


class Format(StrEnum):
    table = "table"
    json = "json"
    junit = "junit"
    html = "html"


def install_runtime(cluster: Cluster, names: list[str], paths: Paths, lock: Hold) -> None:
    """The `burnin` stage on `names` (idempotent: a no-op when everything is in place), under
    the command's `lock`."""
    from kiln.burnin.collect import library_zip
    from kiln.burnin.workloads import workload_path
    from kiln.plan import PlanOptions, make_plan
    from kiln.records.runs import runs_home
    from kiln.runner.execute import execute

    # What the nodes run at collection, kept in the state dir under its digest: the same path
    # for the same modules, so a converged runtime stays converged (kiln.plan.fingerprint).
    data, digest = library_zip()
    library = runs_home() / "burnin" / f"kiln-results-{digest}.zip"
    if not library.is_file():
        library.parent.mkdir(parents=True, exist_ok=True)
        tmp = library.with_name(f".{library.name}.{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(library)
    options = PlanOptions(
        stages=(BURNIN,),
        limit=",".join(names),
        extravars={
            "burnin_prefix": paths.prefix,
            "burnin_results_dir": paths.results,
            "burnin_workloads_src": str(workload_path("gemm").parent),
            "burnin_library_src": str(library),
        },
    )
    with StageDisplay() as display:  # a package install is never silent
        result = execute(make_plan(cluster, options), lock=lock, listener=display)
    if not result.ok:
        bad = result.failed_hosts + result.unreachable_hosts
        stopped = (result.stopped or {}).get("reason", "")
        raise OperationFailed(
            f"the burn-in runtime did not install on {', '.join(bad) or 'the nodes'} {stopped}",
            hint=f"see the run record {result.record}",
        )


def save_renderings(run_dir: Path, report: BurninReport) -> None:
    """report.xml (JUnit) and report.html beside the run's report.json."""
    (run_dir / "report.xml").write_text(render(report, "junit"), encoding="utf-8")
    (run_dir / "report.html").write_text(render(report, "html"), encoding="utf-8")


def burn_in(
    cluster: Cluster, options: BurninOptions, *, install: bool, progress: Progress, lock: Hold
) -> BurninOutcome:
    """install -> run -> judge -> report: the steps of `kiln burnin`, composed, under the
    cluster's `lock` the command holds; its outcome."""
    started = time.monotonic()
    target = select_target(cluster, options)  # invalid input stops here, before the install
    timings: dict[str, float] = {}
    if install:
        progress(f"runtime: burnin stage on {len(target.nodes)} node(s)")
        install_runtime(cluster, target.nodes, options.paths, lock)
        timings["runtime"] = time.monotonic() - started
    # Judged inside the campaign: the node states it sets depend on the verdicts.
    outcome = run_burnin(cluster, target, options, progress=progress)
    outcome.timings = {**timings, "total": time.monotonic() - started, **outcome.timings}
    save_renderings(outcome.run_dir, outcome.report)
    write_timings(outcome.run_dir, len(outcome.nodes), outcome.timings, outcome.pair_rounds)
    return outcome


def node_results(outcome: BurninOutcome) -> dict[str, str]:
    """Each node's burn-in result, as the cluster's shared state keeps it."""
    failed = {verdict.node for verdict in outcome.report.failures if verdict.node}
    untested = outcome.not_tested.keys() | outcome.skipped.keys()
    return {
        node: "not_tested" if node in untested else "fail" if node in failed else "pass"
        for node in outcome.nodes
    }


def _verdict(report: BurninReport) -> str:
    """'passed', '2 failed', or 'incomplete: 1 node(s) not tested' (exit 1 either way)."""
    if report.passed:
        return "[green]passed[/]"
    failed = len(report.failures) - len(report.not_tested)
    parts = [f"[red]{failed} failed[/]"] if failed else []
    if report.not_tested:
        parts.append(f"[yellow]incomplete: {len(report.not_tested)} node(s) not tested[/]")
    return ", ".join(parts)


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
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="Wait for nodes busy with other jobs, then test them (--wait-timeout)."
        ),
    ] = False,
    wait_timeout: Annotated[
        float,
        typer.Option("--wait-timeout", min=0.1, help="Minutes --wait waits at most (default 60)."),
    ] = 60.0,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Run burn-in through Slurm on the compute nodes, judge it, drain what fails.

    Per node (one job pinned to it): GEMM on every device (BF16 on GPUs, FP32 on CPU-only
    nodes) and, on GPU nodes, an all-reduce inside the node; across the nodes: an all-reduce
    with the ring forced (NCCL, or gloo on CPU-only nodes), and a pairwise pass when it misses
    its floor; on nodes that declare InfiniBand HCAs, ib_write_bw between node pairs on every
    rail and the ports' error counters before and after.
    Everything runs inside a maintenance reservation. Quarantined nodes are tested under
    their drain: it is lifted only while a phase's jobs start, by a program on the controller
    that puts it back even if kiln is killed, so an untested node is never schedulable.
    Failing nodes are drained with the reason ("kiln:burnin:RUN: ..."), passing nodes kiln had
    drained are resumed; each change only where the node still holds the reason kiln tested it
    under (a drain someone placed during the run is kept). A reservation a killed run left is
    undone first. A node busy with other
    jobs is "not tested (busy)" and left in service (the run is incomplete: exit 1); --wait
    waits for it, up to --wait-timeout minutes. The run record (report.json, report.xml
    JUnit, report.html) is re-rendered by `kiln report RUN`.

    Exit 0 every check passed, 1 failures or nodes not tested, 2 invalid input, 3 environment,
    130 interrupted (Ctrl-C), 143 terminated (SIGTERM): the jobs cancelled, the reservation
    deleted, every drain as it was.

    Example:

        kiln burnin inventories/sandbox --suite quick --output burnin-report
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    if output is not None:
        output_dir(output)  # exit 3 naming it, before the campaign starts
    start = time.monotonic()

    def progress(message: str) -> None:
        err.print(f"[dim]{time.monotonic() - start:6.1f}s[/] {safe(message)}")

    options = BurninOptions(
        suite=suite.value if suite else None,
        nodes=nodes,
        hours=hours,
        gemm_seconds=seconds,
        drain=not no_drain,
        wait_minutes=wait_timeout if wait else None,
    )
    from kiln.commands._lock import cluster_lock

    with cluster_lock(cluster, "burnin") as shared:  # exit 3 naming the holder if locked
        options.hold = shared.check  # asked before each phase: a lost lock starts nothing more
        outcome = burn_in(
            cluster, options, install=not skip_runtime, progress=progress, lock=shared
        )
        report = outcome.report
        for node, reason in outcome.drained.items():
            err.print(f"[bold red]drained[/] {safe(node)}: {safe(reason)}")
        for node in outcome.resumed:
            err.print(f"[green]resumed[/] {safe(node)}")
        for node, now in outcome.kept.items():
            err.print(
                f"[yellow]kept[/] {safe(node)}: changed by someone else during the run "
                f"({safe(now)})"
            )
        for what in outcome.cleared:
            err.print(f"[yellow]undone[/] an earlier, unfinished burn-in: {safe(what)}")
        for node, why in outcome.not_tested.items():
            err.print(
                f"[yellow]{safe(node)}[/]: {safe(why)}"
            )  # "not tested (busy): job 4711 (alice) ..."
        # The cluster's state on the controller keeps the last verdict per node, for any runner.
        at = datetime.now(UTC).isoformat(timespec="seconds")
        results = node_results(outcome)
        pushed = push_verdicts(cluster, results, outcome.run_id, at)
        err.print(f"[dim]{safe(pushed)}[/]")
        # In service after it: resumed by kiln, or passed without a drain (never out of it).
        untouched = {n for n, r in results.items() if r == "pass"} - set(outcome.under_drain)
        in_service = set(outcome.resumed) | (untouched - outcome.kept.keys())
        moved = record_burnin(
            shared, outcome.run_id, results, report.drain(), report.first_failures(), in_service,
            outcome.under_drain,
        )  # fmt: skip
        err.print(f"[dim]{safe(moved)}[/]")
        if output is not None:
            for name in ("report.json", "report.xml", "report.html"):
                with writing(output / name):
                    shutil.copy2(outcome.run_dir / name, output / name)
        err.print(
            f"burn-in {outcome.suite.name} on {len(outcome.nodes)} node(s) in "
            f"{outcome.timings.get('total', 0):.0f}s: "
            + _verdict(report)
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
