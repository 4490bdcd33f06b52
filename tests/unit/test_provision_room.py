"""kiln.provision, the use case behind `kiln provision` (#29): it plans, asks for confirmation
before the lock, holds the cluster's lock around the run, and records and pushes only while it
still holds it; the command only parses and renders. The controller is a LocalRemote (the real
lock script under a local bash) and ansible-runner is the patched one of test_shards."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
from test_runner import plan_options
from test_shards import STAGE, fleet, runner  # noqa: F401 - `runner` is a fixture
from test_state_lock import LATER, Controller, _killing_runner, _on_controller

from kiln.errors import EnvironmentProblem, ExitCode
from kiln.provision import ProvisionOptions, provision
from kiln.provision import drift as provision_drift
from kiln.state import backend


class Events:
    """Every call the use case makes, in order."""

    def __init__(self, refuse: bool = False) -> None:
        self.calls: list[str] = []
        self.refuse = refuse
        self.outcome = None

    def confirm(self, plan) -> None:
        self.calls.append("confirm")
        if self.refuse:
            raise SystemExit(1)  # what typer.Exit does when the operator says no

    def note(self, line: str) -> None:
        self.calls.append("note")

    def probed(self, probed) -> None:
        self.calls.append("probed")

    def running(self):
        self.calls.append("running")
        return nullcontext(None)

    def finished(self, outcome) -> None:
        self.calls.append("finished")
        self.outcome = outcome


@pytest.fixture
def on_controller(tmp_path, monkeypatch):
    """A fleet whose lock and state live on a local stand-in controller; drift records are
    collected here instead of written over SSH (and not fingerprinted)."""
    cluster = _on_controller(fleet(tmp_path), tmp_path / "ctl")
    remote = Controller()
    monkeypatch.setattr(backend, "controller_remote", lambda c: remote)
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    written: list[tuple] = []

    def write_records(cluster, stages, managed, desired, run_id):
        written.append((tuple(stages), run_id))  # stage -> host -> status
        return {}

    monkeypatch.setattr(provision_drift, "write_records", write_records)
    # the test stages' playbooks live under tests/, outside the tree fingerprints digest
    monkeypatch.setattr(provision_drift, "fingerprints", lambda plan: {})
    return cluster, remote, written


def test_a_full_provision_runs_under_the_lock_then_records_and_pushes(on_controller, runner):  # noqa: F811
    cluster, _remote, written = on_controller
    events = Events()
    options = ProvisionOptions(plan_options([STAGE, LATER]), full=True)
    outcome = provision(cluster, options, events=events, run_id=lambda: "RUN1")
    assert events.calls[0] == "confirm" and events.calls[-2:] == ["running", "finished"]
    assert "probed" not in events.calls  # --full: no drift probe
    assert events.outcome is outcome and outcome.exit_code == ExitCode.OK
    assert outcome.probed is None and outcome.pushed and outcome.unrecorded == {}
    assert written == [(("base", "slurm"), "RUN1")]
    assert outcome.result.run_id == "RUN1" and outcome.result.lock_id is not None
    # The nodes' lifecycle, beside the state on the controller: each compute node declared,
    # reachable and provisioned by this run (its slurm stage quarantined none of them).
    from kiln.lifecycle import State
    from kiln.state.lifecycle import LifecycleLog

    compute = {node.name for node in cluster.compute}
    assert outcome.lifecycle.startswith(f"lifecycle: {3 * len(compute)} event(s), ")
    lives = LifecycleLog(_remote, cluster.state.path).lives()
    assert {name: life.state for name, life in lives.items()} == dict.fromkeys(
        compute, State.PROVISIONED
    )
    assert {life.history[-1][3] for life in lives.values()} == {"run RUN1"}


def test_a_refused_confirmation_takes_no_lock_and_runs_nothing(on_controller, runner):  # noqa: F811
    cluster, remote, written = on_controller
    events = Events(refuse=True)
    with pytest.raises(SystemExit):
        provision(cluster, ProvisionOptions(plan_options([STAGE]), full=True), events=events)
    assert events.calls == ["confirm"]
    assert remote.holders == [] and runner.started == [] and written == []


def test_a_lock_lost_in_the_run_shows_the_outcome_then_ends_in_exit_3_recording_nothing(
    on_controller,
    runner,  # noqa: F811
    monkeypatch,
):
    cluster, remote, written = on_controller
    _killing_runner(monkeypatch, remote)
    events = Events()
    options = ProvisionOptions(plan_options([STAGE, LATER]), full=True)
    with pytest.raises(EnvironmentProblem) as stopped:
        provision(cluster, options, events=events)
    assert stopped.value.exit_code == ExitCode.ENVIRONMENT
    assert stopped.value.message.startswith("kiln provision lost the cluster's lock and stopped")
    assert events.calls[-1] == "finished"  # the summary is shown before the exit 3
    assert events.outcome.pushed is False and written == []  # nothing written without the lock
    assert events.outcome.result.stopped["stage"] == "base"
