"""`kiln plan --estimate`: the measured runs found in the runs home, projected and rendered."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.table import Table

from kiln.console import out
from kiln.errors import InvalidInputError
from kiln.inventory import Cluster
from kiln.plan.estimate import (
    FLEET_SCALE,
    Estimate,
    MeasuredBurnin,
    MeasuredStage,
    Target,
    estimate,
    measured_burnin,
    measured_stages,
)
from kiln.plan.shards import worker_hosts
from kiln.records.runs import read_summary, runs_home


def measured_run(inventory: Path, from_run: Path | None) -> tuple[Path, list[MeasuredStage]]:
    """The provision run to project from: `from_run`, else this inventory's run with the most
    measured host-stages (the first whole bring-up, not a narrowed re-apply; newest on a tie)."""
    if from_run is not None:
        stages = measured_stages(read_summary(from_run / "summary.json"))
        return from_run, stages
    wanted = str(inventory.resolve())
    best: tuple[int, Path, list[MeasuredStage]] | None = None
    runs = runs_home() / "runs"
    for path in sorted(runs.iterdir(), reverse=True) if runs.is_dir() else ():
        summary_path = path / "summary.json"
        if not summary_path.is_file():
            continue
        summary = read_summary(summary_path)
        if summary.get("inventory") != wanted or summary.get("check"):
            continue
        stages = measured_stages(summary)
        size = sum(stage.hosts for stage in stages)
        if size and (best is None or size > best[0]):
            best = (size, path, stages)
    if best is None:
        raise InvalidInputError(
            f"no provision run of {inventory} carries its measured cost",
            hint="run `kiln provision` on it first (or give --from-run RUN_DIR)",
        )
    return best[1], best[2]


def measured_burnin_run(cluster: Cluster) -> tuple[Path, MeasuredBurnin] | None:
    """The newest burn-in of this cluster with its timings (timings.json), if any."""
    runs = runs_home() / "runs"
    for path in sorted(runs.iterdir(), reverse=True) if runs.is_dir() else ():
        try:
            manifest = json.loads((path / "run.json").read_text(encoding="utf-8"))
            timings = json.loads((path / "timings.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if manifest.get("cluster") == cluster.name and (found := measured_burnin(timings)):
            return path, found
    return None


def target_for(
    cluster: Cluster, nodes: int, cpus: int | None, mirror_gbps: float | None,
    node_download_gib: float | None, workers: int | None = None,
) -> Target:  # fmt: skip
    """`workers`: worker controllers running the shards (None: the inventory's kiln_workers;
    0: this controller alone)."""
    rollout = cluster.rollout
    shard_hosts = min(rollout.shard_size, nodes)
    size = rollout.batch_size
    batch = (
        size if isinstance(size, int) else math.ceil(shard_hosts * float(size.rstrip("%")) / 100)
    )
    return Target(
        nodes=nodes, cpus=cpus or os.cpu_count() or 1, memory_gib=rollout.controller_memory_gib,
        forks=rollout.forks, shard_size=rollout.shard_size, batch_size=max(1, batch),
        mirror_gbps=mirror_gbps, node_download_gib=node_download_gib,
        machines=max(1, len(worker_hosts(cluster)) if workers is None else workers),
    )  # fmt: skip


@dataclass
class Projection:
    """The measured runs and what they project to: the inventory's size and 12,500 nodes."""

    run: Path
    stages: list[MeasuredStage]
    burnin: tuple[Path, MeasuredBurnin] | None
    estimates: list[Estimate]

    def to_dict(self) -> dict:
        burnin = None
        if self.burnin is not None:
            burnin = {"run": str(self.burnin[0]), **asdict(self.burnin[1])}
        return {
            "measured": {
                "run": str(self.run),
                "stages": [
                    {**asdict(s), "batch_seconds": round(s.batch_seconds, 1)} for s in self.stages
                ],  # fmt: skip
                "burnin": burnin,
            },
            "estimates": [e.to_dict() for e in self.estimates],
        }


def project(
    cluster: Cluster, inventory: Path, *, from_run: Path | None, cpus: int | None,
    mirror_gbps: float | None, node_download_gib: float | None, workers: int | None = None,
) -> Projection:  # fmt: skip
    run, stages = measured_run(inventory, from_run)
    burnin = measured_burnin_run(cluster)
    sizes = sorted({len(cluster.compute) or 1, FLEET_SCALE})
    projected = [
        estimate(
            stages,
            target_for(cluster, n, cpus, mirror_gbps, node_download_gib, workers),
            burnin[1] if burnin else None,
        )  # fmt: skip
        for n in sizes
    ]
    return Projection(run, stages, burnin, projected)


def _hours(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def render_projection(projection: Projection) -> None:
    out.print(f"Measured: provision run {projection.run}")
    for stage in projection.stages:
        out.print(
            f"  {stage.name}: {stage.hosts} host(s) in {stage.seconds:.0f}s, controller CPU "
            f"{stage.controller_cpu_s:.0f}s, a batch of {stage.batch_hosts:g} host(s) "
            f"{stage.batch_seconds:.0f}s"
        )
    if projection.burnin is not None:
        path, burnin = projection.burnin
        out.print(
            f"  burn-in {path}: {burnin.nodes} node(s), jobs {burnin.jobs_seconds:.0f}s, "
            f"pairwise pass {burnin.pairs_seconds:.0f}s in {burnin.pair_rounds} round(s)"
        )
    projected = projection.estimates
    table = Table(title="Time to cluster, projected")
    table.add_column("stage")
    for e in projected:
        table.add_column(f"{e.target.nodes:,} nodes", justify="right")
    for index, stage in enumerate(projected[0].stages):
        table.add_row(
            stage.name,
            *(f"{_hours(e.stages[index].seconds)} ({e.stages[index].bound})" for e in projected),
        )
    table.add_row("mirror", *(_hours(e.mirror_seconds) for e in projected))
    table.add_row("provision", *(_hours(e.provision_seconds) for e in projected))
    table.add_row("burn-in", *(_hours(e.burnin_seconds) for e in projected))
    table.add_row("[bold]total[/]", *(f"[bold]{_hours(e.total_seconds)}[/]" for e in projected))
    table.add_row("bottleneck", *(e.bottleneck for e in projected))
    out.print(table)
    target = projected[-1].target
    where = "this controller" if target.machines == 1 else f"{target.machines} worker controllers"
    out.print(
        f"Shards on {where}: {target.cpus} CPU(s), {target.memory_gib:g} GiB for shards "
        f"each, {target.forks} forks, shards of {target.shard_size}"
    )
    for note in projected[-1].notes:
        out.print(f"[dim]note: {note}[/]")
