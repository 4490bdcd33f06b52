"""Drift-aware re-apply for a provision: probe, narrow the plan, record afterwards.

`kiln provision` skips the node-stages the probe finds unchanged (unless --full) and records
what succeeded after the run; `kiln plan --live` shows per node what drifted and what would run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from kiln.drift import ALWAYS, Assessment, assess, probe_nodes, write_records
from kiln.errors import InvalidInputError
from kiln.inventory import Cluster
from kiln.plan import Plan, make_plan
from kiln.plan.fingerprint import fingerprints
from kiln.records.runs import retry_hosts
from kiln.runner.result import RunResult


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


def record(
    cluster: Cluster, result: RunResult, probed: Probed | None, full_plan: Plan
) -> dict[str, str]:
    """After a real run, each host keeps a record of the stages that succeeded there; the hosts
    where it could not be written, and why (they run again next time)."""
    if result.check:
        return {}
    desired = probed.desired if probed is not None else fingerprints(full_plan)
    statuses = {stage.name: stage.statuses() for stage in result.stages if stage.name not in ALWAYS}
    return write_records(cluster, statuses, result.managed, desired, result.run_id)
