"""`kiln provision`: validate the inventory, then run the stages in order on its hosts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from kiln.commands._progress import StageDisplay
from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, folded, out, print_json, safe
from kiln.errors import ExitCode, InvalidInputError
from kiln.plan.stages import Stage
from kiln.records.status import HostStatus
from kiln.runner.result import RunResult

if TYPE_CHECKING:  # kiln.inventory loads pydantic: not on the path of `kiln --help`
    from kiln.inventory import Cluster
    from kiln.plan import Plan
    from kiln.provision import Probed, ProvisionOutcome

STATUS_STYLE = {
    HostStatus.OK: "green",
    HostStatus.CHANGED: "yellow",
    HostStatus.FAILED: "bold red",
    HostStatus.UNREACHABLE: "bold magenta",
    HostStatus.ABORTED: "red",
    HostStatus.NOT_RUN: "dim",
    "unchanged": "dim green",  # the drift probe's skip: no run, so no HostStatus
}


def confirm_or_refuse(cluster: Cluster, stages: list[Stage], yes: bool, check: bool) -> None:
    """Ask on a terminal before touching hosts (not with --yes or --check); refuse without one."""
    if yes or check:
        return
    if not (sys.stdin.isatty() and err.is_terminal):
        raise InvalidInputError(
            "no terminal to confirm on; refusing to touch hosts",
            hint="pass --yes to provision without a prompt (GitOps pipelines)",
        )
    names = ", ".join(stage.name for stage in stages)
    if not typer.confirm(f"Provision {cluster.name} ({names}) on its hosts?", err=True):
        err.print("nothing done")
        raise typer.Exit(int(ExitCode.FAILED))


def render_summary(result: RunResult) -> None:
    stages = [stage.name for stage in result.stages]
    table = Table(title=f"kiln provision {result.run_id}", title_justify="left")
    table.add_column("host")
    for name in stages:
        table.add_column(name)
    unchanged = {(stage, host) for stage, hosts in result.unchanged.items() for host in hosts}
    for host in dict.fromkeys([*result.hosts, *(host for _, host in sorted(unchanged))]):
        statuses = result.hosts.get(host, {})
        cells = []
        for name in stages:
            status = statuses.get(name, "unchanged" if (name, host) in unchanged else "-")
            cells.append(f"[{STATUS_STYLE.get(status, '')}]{status}[/]" if status != "-" else "-")
        table.add_row(safe(host), *cells)
    out.print(folded(table))
    for stage in result.stages:
        for host, outcome in stage.hosts.items():
            if outcome.bad:
                out.print(
                    f"{stage.name}: {safe(host)} {outcome.status} at "
                    f"'{safe(outcome.failed_task)}': {safe(outcome.message)}"
                )
    for stage in result.stages:
        if len(stage.shards or ()) > 1:
            parts = [f"{s.name} {s.status}" for s in stage.shards or ()]
            out.print(f"{stage.name} shards: {', '.join(parts)}")
    if result.stopped:
        out.print(f"stopped in {result.stopped['stage']}: {safe(result.stopped['reason'])}")
        if result.stopped.get("shards_not_started"):
            names = ", ".join(result.stopped["shards_not_started"])
            out.print(f"shards not started: {names}")
    if result.new_nodes is not None:
        new = result.new_nodes["new"]
        out.print(f"new nodes: {len(new)} ({', '.join(new[:10])}{' ...' if len(new) > 10 else ''})")
    if unchanged:
        out.print(f"unchanged (drift probe, skipped): {len(unchanged)} node-stage(s)")
    out.print(f"changed tasks: {result.changed}; run record: {result.record}")


def provision(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    stages: Annotated[
        str | None, typer.Option(help="Comma-separated stages (default: all).")
    ] = None,
    limit: Annotated[str | None, typer.Option(help="Ansible host pattern to run on.")] = None,
    check: Annotated[
        bool, typer.Option(help="Check mode: show what would change, with diffs.")
    ] = False,
    retry_failed: Annotated[
        bool, typer.Option(help="Only the failed/unreachable hosts of the last run.")
    ] = False,
    batch_size: Annotated[
        str | None, typer.Option(help="Rolling batch: a count N or a percentage P%.")
    ] = None,
    new_nodes: Annotated[
        bool,
        typer.Option(
            help="Scale-out: every stage on nodes no earlier run provisioned; only the "
            "cluster-wide files on the others."
        ),
    ] = False,
    full: Annotated[
        bool,
        typer.Option(help="Every stage on every host, even where the drift probe finds no change."),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Provision the inventory's hosts, stage by stage (exit 0 all good, 1 a host failed).

    Example:

        kiln provision inventories/sandbox --yes
    """
    from kiln.commands._lock import say
    from kiln.commands.plan import render_assessment
    from kiln.inventory import require_valid
    from kiln.inventory.batches import normalize_batch_size
    from kiln.plan import PlanOptions
    from kiln.plan.stages import select_stages
    from kiln.provision import ProvisionOptions
    from kiln.provision import provision as run_provision

    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    selected = select_stages(stages)
    plan_options = PlanOptions(
        stages=tuple(selected) if stages else None,  # None: the inventory's stages
        limit=limit,
        check=check,
        retry_failed=retry_failed,
        batch_size=normalize_batch_size(batch_size) if batch_size else None,
        new_nodes=new_nodes,
    )

    class Events:
        def confirm(self, plan: Plan) -> None:
            confirm_or_refuse(cluster, [planned.stage for planned in plan.stages], yes, check)

        def note(self, line: str) -> None:
            say(line)

        def probed(self, probed: Probed) -> None:
            render_assessment(probed, detail=check)

        def running(self) -> StageDisplay:
            return StageDisplay()

        def finished(self, outcome: ProvisionOutcome) -> None:
            for host, why in sorted(outcome.unrecorded.items()):
                err.print(
                    f"drift record not written on {safe(host)} ({safe(why)}): it runs again "
                    "next time"
                )
            if outcome.lifecycle:
                err.print(f"[dim]{safe(outcome.lifecycle)}[/]")
            if json_:
                print_json("provision", outcome.result.to_dict())
            else:
                render_summary(outcome.result)

    # exit 3 naming the holder if locked; a lock lost on the way stops the run before its next
    # stage or shard, and the command exits 3 saying so (after the summary)
    outcome = run_provision(cluster, ProvisionOptions(plan_options, full=full), events=Events())
    return outcome.exit_code
