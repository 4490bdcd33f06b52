"""Drift-aware re-apply in the commands: probe, narrow the plan, show it, record afterwards.

Shared by `kiln provision` (skips unchanged node-stages unless --full; records after the run)
and `kiln plan --live` (shows per node what drifted and what would run).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from rich.table import Table

from kiln.console import err, out, safe
from kiln.drift import ALWAYS, Assessment, assess, probe_nodes, write_records
from kiln.errors import InvalidInputError
from kiln.inventory import Cluster
from kiln.plan import Plan, make_plan
from kiln.plan.fingerprint import fingerprints
from kiln.records.runs import retry_hosts


@dataclass(frozen=True, slots=True)
class Probed:
    plan: Plan  # the plan narrowed to the node-stages that must run
    assessment: Assessment
    desired: dict[str, dict[str, str]]  # the full plan's fingerprints, recorded after the run
    seconds: float


def _failed_last(cluster: Cluster) -> set[str]:
    try:
        return set(retry_hosts(cluster.inventory_dir))
    except InvalidInputError:  # no previous run
        return set()


def probe_plan(cluster: Cluster, plan: Plan) -> Probed:
    """One probe per target, then the plan again without the unchanged node-stages."""
    start = time.monotonic()
    desired = fingerprints(plan)
    probes = probe_nodes([cluster.node(name) for name in plan.targets])
    names = [planned.name for planned in plan.stages]
    assessment = assess(desired, probes, names, _failed_last(cluster))
    narrowed = make_plan(cluster, replace(plan.options, skip=assessment.skip()))
    return Probed(narrowed, assessment, desired, time.monotonic() - start)


def render_assessment(probed: Probed, *, detail: bool) -> None:
    """The counts on stderr; with `detail`, one row per node-stage that runs (why) on stdout."""
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


def record(cluster: Cluster, result: Any, probed: Probed | None, full_plan: Plan) -> None:
    """After a real run: each host keeps a record of the stages that succeeded there."""
    if result.check:
        return
    desired = probed.desired if probed is not None else fingerprints(full_plan)
    stages = [entry for entry in result.stages if entry["name"] not in ALWAYS]
    problems = write_records(cluster, stages, result.managed, desired, result.run_id)
    for host, why in sorted(problems.items()):
        err.print(
            f"drift record not written on {safe(host)} ({safe(why)}): it runs again next time"
        )
