"""`kiln plan INVENTORY`: the offline plan (stages, hosts, batches, generated files)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from kiln.commands._estimate import project, render_projection
from kiln.commands._output import output_dir, writing
from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, folded, out, print_json, safe
from kiln.errors import ExitCode, InvalidInputError, OperationFailed
from kiln.inventory import require_valid
from kiln.inventory.batches import BATCH_SIZE
from kiln.plan import Plan, PlanOptions, make_plan, write_files
from kiln.render.hostlist import compress

if TYPE_CHECKING:  # kiln.provision reaches SSH and the runner: only on the path of --live
    from kiln.accounting import Change
    from kiln.inventory import Cluster
    from kiln.provision import Probed
    from kiln.slurmctl.versions import SlurmUpgrade


def _shorten(hostlist: str, width: int = 60) -> str:
    return hostlist if len(hostlist) <= width else hostlist[: width - 3] + "..."


def render(plan: Plan, output: Path | None, changed_files: list[str]) -> None:
    cluster = plan.cluster
    out.print(
        f"Plan for cluster [bold]{cluster.name}[/]: {len(cluster.controllers)} "
        f"controller(s), {len(cluster.compute)} compute nodes, {cluster.gpu_total} GPUs"
    )
    out.print(f"Versions: {cluster.versions.describe()}")
    table = Table("stage", "hosts", "batches", "first batch", "what it does")
    for stage in plan.stages:
        first = _shorten(compress(list(stage.batches[0]))) if stage.batches else "-"
        table.add_row(
            stage.name, str(len(stage.hosts)), str(len(stage.batches)), first, stage.summary
        )
    out.print(folded(table))
    rolls = [(stage.name, roll) for stage in plan.stages if (roll := plan.rolling(stage))]
    if rolls:
        out.print("Disruptive changes, rolled batch by batch (docs/operations.md):")
    for name, roll in rolls:
        changes = ", ".join(change.describe() for change in roll.changes)
        out.print(f"  {name}: {changes}; {roll.describe()}", highlight=False)
    files = Table("generated file", "lines", "sha256")
    for generated in plan.files:
        status = ""
        if output is not None:
            status = " (changed)" if generated.name in changed_files else " (unchanged)"
        files.add_row(
            generated.name + status, str(generated.content.count("\n")), generated.sha256[:16]
        )
    out.print(folded(files))
    if output is not None:
        err.print(f"wrote {len(plan.files)} files to {output}")


def render_assessment(probed: Probed, *, detail: bool) -> None:
    """The drift probe's counts on stderr; with `detail`, one row per node-stage that runs (and
    why) on stdout. Shown by `kiln plan --live` and before a drift-aware `kiln provision`."""
    assessment = probed.assessment
    counts = assessment.counts()
    total = sum(counts.values())
    parts = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))
    err.print(
        f"drift probe: {len(probed.plan.targets)} node(s) in {probed.seconds:.1f}s; "
        f"{total} node-stage(s): {parts or 'none'}",
        highlight=False,
    )
    rows = assessment.to_run()
    if not detail:
        return
    if not rows:
        out.print("No drift: every node-stage is as recorded; nothing would run.")
        return
    table = Table("node", "stage", "why it runs", title="Drift (kiln.drift)", title_justify="left")
    for decision in rows:
        table.add_row(safe(decision.node), decision.stage, safe(decision.describe()))
    out.print(table)


def accounting_changes(cluster: Cluster) -> list[Change] | None:
    """--live: the sacctmgr commands provision would run for kiln_slurm.accounting (None when
    nothing is declared). A slurmdbd that does not answer yet is an empty database."""
    declared = cluster.slurm.declared_accounting
    if declared is None:
        return None
    from kiln.accounting import changes
    from kiln.parsers.sacctmgr import Database
    from kiln.slurmctl import held_accounting

    try:
        held = held_accounting(cluster)
    except OperationFailed as error:
        err.print(f"accounting: {error.message}; comparing with an empty database", highlight=False)
        held = Database.empty()
    return changes(declared, cluster.name, held)


def render_accounting(cluster: Cluster, todo: list[Change] | None) -> None:
    declared = cluster.slurm.declared_accounting
    if declared is None:
        return
    counts = (
        f"{len(declared.qos)} QoS, {len(declared.accounts)} account(s), "
        f"{len(declared.users)} user(s) declared"
    )
    if todo is None:
        out.print(f"Accounting: {counts}; `kiln plan --live` shows the sacctmgr changes")
    elif not todo:
        out.print(f"Accounting: {counts}; slurmdbd holds them as declared, nothing to change")
    else:
        out.print(f"Accounting: {counts}; {len(todo)} sacctmgr change(s), in order:")
        for change in todo:
            out.print(f"  {safe(change.describe())}", highlight=False)


def render_upgrade(upgrade: SlurmUpgrade | None) -> None:
    """--live: the in-place Slurm upgrade provision would run, step by step, or why it refuses."""
    if upgrade is None:
        return
    for host, why in sorted(upgrade.unread.items()):
        err.print(f"slurm versions: {safe(host)} not read ({safe(why)})", highlight=False)
    if upgrade.plan.problems:
        err.print("Slurm upgrade: refused, nothing would change:", highlight=False)
        for problem in upgrade.plan.problems:
            err.print(f"  {safe(problem)}", highlight=False)
    elif upgrade.plan.upgrading:
        out.print(f"Slurm upgrade to {upgrade.plan.to}, in Slurm's order, before the slurm stage:")
        for number, step in enumerate(upgrade.plan.steps, 1):
            hosts = _shorten(",".join(step.hosts))
            out.print(
                f"  {number}. {step.kind} on {safe(hosts)}: {safe(step.detail)}", highlight=False
            )
    else:
        out.print(f"Slurm: every host runs {upgrade.plan.to} or has no Slurm yet; no upgrade")


def plan(
    inventory: Annotated[Path, typer.Argument(help="Ansible inventory directory (or file).")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write slurm.conf, gres.conf, cgroup.conf and topology.conf here.",
        ),
    ] = None,
    batch_size: Annotated[
        str | None,
        typer.Option(
            "--batch-size",
            help="Hosts per rolling batch, a count or N% (default: kiln_rollout).",
        ),
    ] = None,
    json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Probe the nodes (one SSH exec each): show per node what drifted and which "
            "stages `kiln provision` would run there, the sacctmgr changes a declared "
            "kiln_slurm.accounting needs, and the steps of an in-place Slurm upgrade when the "
            "nodes run an older Slurm than declared.",
        ),
    ] = False,
    detailed_exitcode: Annotated[
        bool,
        typer.Option(
            "--detailed-exitcode",
            help="Exit 4 when a generated file differs from the one in --output.",
        ),
    ] = False,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate",
            help="Time to cluster: project a bring-up of this inventory, and of 12,500 nodes, "
            "from the measured cost of its provision run with the most hosts (and its newest "
            "burn-in), per stage, naming the bottleneck (controller CPU, rolling batches, "
            "mirror bandwidth, burn-in length). docs/scale.md.",
        ),
    ] = False,
    from_run: Annotated[
        Path | None,
        typer.Option(
            "--from-run",
            help="With --estimate: the provision run record to project from (a run directory).",
        ),
    ] = None,
    controller_cpus: Annotated[
        int | None,
        typer.Option(
            "--controller-cpus",
            min=1,
            help="With --estimate: the controller's cores (default: this machine's).",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=0,
            help="With --estimate: worker controllers running the shards, each with "
            "--controller-cpus cores (default: the inventory's kiln_workers; 0: this "
            "controller alone).",
        ),
    ] = None,
    mirror_gbps: Annotated[
        float | None,
        typer.Option(
            "--mirror-gbps", min=0.001, help="With --estimate: the mirror's bandwidth, Gbit/s."
        ),
    ] = None,
    node_download_gib: Annotated[
        float | None,
        typer.Option(
            "--node-download-gib",
            min=0.001,
            help="With --estimate: what one node downloads from the mirror, GiB.",
        ),
    ] = None,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Show what `kiln provision` would do, offline: stages, hosts, batches and files.

    Validates first (exit 2 on any error). Contacts no host, unless --live.

    Example:

        kiln plan inventories/example-h100 --output generated/
    """
    if batch_size is not None and not BATCH_SIZE.match(batch_size):
        raise InvalidInputError(
            f"--batch-size {batch_size!r} is neither a count nor N%",
            hint="for example --batch-size 8 or --batch-size 25%",
        )
    if detailed_exitcode and output is None:
        raise InvalidInputError(
            "--detailed-exitcode compares against --output DIR",
            hint="add --output DIR (the files you keep under version control)",
        )
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    if estimate:
        projection = project(
            cluster, inventory, from_run=from_run, cpus=controller_cpus, workers=workers,
            mirror_gbps=mirror_gbps, node_download_gib=node_download_gib,
        )  # fmt: skip
        if json:
            print_json("plan-estimate", projection.to_dict())
        else:
            render_projection(projection)
        return int(ExitCode.OK)
    result = make_plan(cluster, PlanOptions(batch_size=batch_size))
    probed = None
    todo = None
    upgrade = None
    if live:  # kiln.drift: the plan narrowed to the node-stages that would run
        from kiln.provision import probe_plan

        probed = probe_plan(cluster, result)
        render_assessment(probed, detail=not json)
        result = probed.plan
        todo = accounting_changes(cluster)
        from kiln.slurmctl.versions import slurm_upgrade

        upgrade = slurm_upgrade(cluster)
    changed: list[str] = []
    if output is not None:
        with writing(output):  # a file in the way, a read-only or full disk: exit 3 naming it
            changed = write_files(result.files, output_dir(output, probe=False))
    if json:
        document = result.to_dict(changed)
        if probed is not None:
            document["drift"] = probed.assessment.to_dict()
        if todo is not None:
            document["accounting"] = [change.to_dict() for change in todo]
        if upgrade is not None:
            document["slurm_upgrade"] = {
                **upgrade.plan.model_dump(),
                "unread": upgrade.unread,
            }
        print_json("plan", document)
    else:
        render(result, output, changed)
        render_accounting(cluster, todo)
        render_upgrade(upgrade)
    if detailed_exitcode and changed:
        return int(ExitCode.CHANGES_PENDING)
    return int(ExitCode.OK)
