"""One provision: plan, confirm, lock, probe and narrow, run, record, push (no printing)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Protocol

from kiln.inventory import Cluster
from kiln.plan import Plan, PlanOptions, make_plan
from kiln.provision.drift import Probed, probe_plan, record
from kiln.records.runs import ensure_writable, new_run_id, runs_home
from kiln.runner.execute import Listener, execute
from kiln.runner.result import RunResult
from kiln.state.hold import hold_cluster
from kiln.state.lifecycle import record_run


@dataclass(frozen=True)
class ProvisionOptions:
    plan: PlanOptions
    full: bool = False  # every node-stage, even where the drift probe finds no change


class ProvisionEvents(Protocol):
    """What a provision tells its caller before, during and after the run."""

    def confirm(self, plan: Plan) -> None:
        """Asked once the plan is made, before the lock: raise to touch nothing."""

    def note(self, line: str) -> None:
        """A line for the operator: the lock's backend, and why."""

    def probed(self, probed: Probed) -> None:
        """The drift probe's view, before the narrowed plan runs."""

    def running(self) -> AbstractContextManager[Listener]:
        """The runner's listener for the stages' progress, entered around the run only."""

    def finished(self, outcome: ProvisionOutcome) -> None:
        """The outcome, while the lock is still held: a lock lost during the run then ends the
        provision in EnvironmentProblem (exit 3) after the caller has shown it."""


@dataclass
class ProvisionOutcome:
    result: RunResult
    probed: Probed | None  # None: --full or --new-nodes ran every node-stage
    # host -> why its drift record was not written (it runs again next time)
    unrecorded: dict[str, str] = field(default_factory=dict)
    pushed: bool = False  # the run's summary is in the cluster's state on the controller
    lifecycle: str | None = None  # what the run moved in the nodes' lifecycle log, and where

    @property
    def exit_code(self) -> int:
        return self.result.exit_code


def provision(
    cluster: Cluster,
    options: ProvisionOptions,
    *,
    events: ProvisionEvents,
    run_id: Callable[[], str] = new_run_id,
) -> ProvisionOutcome:
    """Provision `cluster` under its lock (EnvironmentProblem, exit 3, naming the holder when
    another run holds it; a lock lost on the way stops the run before its next stage or shard
    and ends in exit 3 after the run's record). Drift-aware unless `full` or new nodes: only the
    node-stages the probe finds changed run. Records and the state push happen only while the
    lock is still held: without it, nothing more is written on the cluster."""
    plan = make_plan(cluster, options.plan)
    events.confirm(plan)
    ensure_writable(runs_home())  # exit 3 naming it, before any lock is taken
    run = run_id()
    with hold_cluster(cluster, "provision", note=events.note, run_id=run) as shared:
        if options.plan.new_nodes:  # the joined nodes, read under the lock
            plan = make_plan(cluster, replace(options.plan, joined=shared.joined()))
        full_plan, probed = plan, None
        if not (options.full or options.plan.new_nodes):
            probed = probe_plan(cluster, plan)
            events.probed(probed)
            plan = probed.plan
        with events.running() as listener:
            result = execute(plan, listener=listener, lock=shared, run_id=run)
        outcome = ProvisionOutcome(result, probed)
        if shared.still_held():
            outcome.unrecorded = record(cluster, result, probed, full_plan)
            summary = result.to_dict()
            shared.push_run(summary)
            outcome.pushed = True
            outcome.lifecycle = record_run(shared, summary)
        events.finished(outcome)
    return outcome
