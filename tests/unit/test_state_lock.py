"""Trust under interruption (issue 27): a run that loses the cluster's lock stops before its next
stage or shard and exits 3 saying so; every command that changes the cluster takes that lock.

The controller is a LocalRemote (tests/unit/test_state.py): the real lock script, flock and
heartbeat, run by a local bash. "Killing the holder shell" is what an operator's `kill` on the
controller, an OOM kill or a TTL expiry does; removing the lock file is what a hand-made
"unlock" does.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from test_runner import SMOKE, plan_options
from test_shards import STAGE, fleet, runner  # noqa: F401 - `runner` is a fixture

from kiln.commands._lock import cluster_lock
from kiln.errors import EnvironmentProblem, ExitCode
from kiln.inventory import require_valid
from kiln.plan import make_plan
from kiln.plan.stages import Stage
from kiln.records import lock
from kiln.runner import engine
from kiln.runner.execute import execute
from kiln.state import backend, controller
from kiln.state.remote import LocalRemote

REPO = Path(__file__).resolve().parents[2]
LATER = Stage("slurm", str(SMOKE), "")


class Controller(LocalRemote):
    """A LocalRemote that remembers the holder shells it started, to kill them."""

    def __init__(self) -> None:
        super().__init__("ctl01")
        self.holders: list = []

    def open(self, command: str):
        session = super().open(command)
        if controller.STILL in command:  # the lock script
            self.holders.append(session)
        return session

    def kill_holder(self) -> None:
        self.holders[-1].process.kill()
        self.holders[-1].process.wait(10)


def _on_controller(cluster, directory: Path):
    from kiln.inventory.schema import StateSpec

    spec = StateSpec(backend="controller", path=str(directory))
    return cluster.model_copy(update={"state": spec})


# --- the controller's lock notices its loss ----------------------------------------------------


def test_check_confirms_a_held_lock_and_a_killed_holder_shell_is_lost(tmp_path):
    remote, where = Controller(), str(tmp_path / "kiln")
    held = controller.ControllerLock(remote, "/inv", run_id="R1", directory=where)
    held.acquire()
    try:
        for _ in range(3):  # each check is one question and one answer
            held.check()
        assert not held.lost.is_set()
        remote.kill_holder()
        with pytest.raises(lock.LockLost) as lost:
            held.check()
        assert lost.value.exit_code == ExitCode.ENVIRONMENT
        assert f"lock on controller ctl01:{where} was lost" in lost.value.message
        # and it was really gone: another run takes it
        other = controller.ControllerLock(LocalRemote(), "/inv", run_id="R2", directory=where)
        other.acquire()
        other.release()
        with pytest.raises(lock.LockLost):  # lost stays lost
            held.check()
    finally:
        held.release()


def test_a_removed_lock_file_is_lost_and_the_new_holder_keeps_its_record(tmp_path):
    """Removing the lock file lets a second run lock a new file while the first holds the old
    (two holders): the first finds out at its next check, and leaves the new holder's record."""
    where = tmp_path / "kiln"
    first = controller.ControllerLock(LocalRemote(), "/inv", run_id="FIRST", directory=str(where))
    first.acquire()
    (where / "lock").unlink()
    second = controller.ControllerLock(LocalRemote(), "/inv", run_id="SECOND", directory=str(where))
    second.acquire()
    try:
        with pytest.raises(lock.LockLost) as lost:
            first.check()
        assert f"{where}/lock was removed or replaced" in lost.value.message
        first.release()
        assert controller.probe(LocalRemote(), str(where)).run_id == "SECOND"
        assert json.loads((where / "holder.json").read_text())["run_id"] == "SECOND"
    finally:
        first.release()
        second.release()


def test_the_heartbeat_notices_a_lost_lock_without_being_asked(tmp_path):
    remote = Controller()
    held = controller.ControllerLock(remote, "/inv", directory=str(tmp_path / "k"), heartbeat=0.1)
    held.acquire()
    try:
        remote.kill_holder()
        deadline = time.monotonic() + 10
        while not held.lost.is_set():
            assert time.monotonic() < deadline, "the heartbeat did not notice"
            time.sleep(0.05)
        assert "holder shell" in held.lost_reason or "closed" in held.lost_reason
    finally:
        held.release()


def test_a_killed_holder_leaves_a_record_the_next_taker_reports_as_stale(tmp_path):
    remote, where = Controller(), str(tmp_path / "kiln")
    doomed = controller.ControllerLock(remote, "/inv", run_id="DOOMED", directory=where)
    doomed.acquire()
    remote.kill_holder()  # killed: no chance to clear holder.json
    doomed.release()
    with controller.ControllerLock(LocalRemote(), "/inv", directory=where) as taken:
        assert taken.cleared_stale.run_id == "DOOMED"
    with controller.ControllerLock(LocalRemote(), "/inv", directory=where) as again:
        assert again.cleared_stale is None  # a clean release leaves nothing


def test_a_removed_local_lock_file_is_lost(tmp_path):
    with lock.InventoryLock(tmp_path, home=tmp_path / "state") as held:
        held.check()
        held.path.unlink()
        with pytest.raises(lock.LockLost) as lost:
            held.check()
        assert "removed or replaced" in lost.value.message


# --- the runner stops before its next stage or shard ------------------------------------------


def _killing_runner(monkeypatch, remote: Controller, after: int = 1) -> list[str]:
    """Wrap the patched ansible-runner: the `after`-th process kills the lock's holder shell
    while it runs. Returns the shard limit of every process started."""
    started: list[str] = []
    init = engine.init_runner

    def init_runner(**kwargs):
        started.append(Path(kwargs["limit"][1:]).read_text().split())
        if len(started) == after:
            remote.kill_holder()
        return init(**kwargs)

    monkeypatch.setattr(engine, "init_runner", init_runner)
    return started


def test_a_lock_lost_in_a_stage_starts_no_further_shard_or_stage(tmp_path, runner, monkeypatch):  # noqa: F811
    cluster = _on_controller(fleet(tmp_path, max_parallel_shards=1), tmp_path / "ctl")
    remote = Controller()
    started = _killing_runner(monkeypatch, remote)
    state = tmp_path / "state"
    plan = make_plan(cluster, plan_options([STAGE, LATER], max_parallel_shards=1), state)
    shared = backend.SharedState(cluster, run_id="R", home=state, remote_factory=lambda c: remote)
    with shared:
        result = execute(plan, lock=shared, home=state, run_id="R")
        assert shared.lost
    assert started == [["ctl"]]  # the controllers' shard, in flight when the lock went
    assert "lock" in result.stopped["reason"] and "was lost" in result.stopped["reason"]
    assert result.stopped["stage"] == "base"
    assert result.stopped["shards_not_started"]  # the compute shards never started
    assert [(s.name, s.status) for s in result.stages][1] == ("slurm", "skipped")
    assert result.exit_code == ExitCode.FAILED
    summary = json.loads((Path(result.record) / "summary.json").read_text())
    assert summary["stopped"] == result.stopped


def test_a_lock_lost_between_stages_stops_before_the_next(tmp_path, runner, monkeypatch):  # noqa: F811
    cluster = _on_controller(fleet(tmp_path), tmp_path / "ctl")
    remote = Controller()
    state = tmp_path / "state"
    plan = make_plan(cluster, plan_options([STAGE, LATER]), state)
    with backend.SharedState(cluster, home=state, remote_factory=lambda c: remote) as shared:
        per_stage = 1 + 3  # the controllers' shard, then one shard per rack
        started = _killing_runner(monkeypatch, remote, after=per_stage)
        result = execute(plan, lock=shared, home=state)
    assert len(started) == per_stage  # every shard of base, none of slurm
    assert result.stages[0].status == "successful"
    assert (result.stages[1].status, result.stages[1].reason) == ("skipped", "lock lost")
    assert result.stopped["stage"] == "slurm"


def test_a_stage_run_inside_a_held_command_runs_under_its_hold_and_stops_with_it(
    tmp_path,
    runner,  # noqa: F811
    monkeypatch,
    capsys,
):
    """`kiln burnin` installs its runtime with a stage run that takes no lock of its own: it
    runs under the hold the command hands it (not refused by it), and a loss stops it and
    exits 3."""
    cluster = _on_controller(fleet(tmp_path), tmp_path / "ctl")
    remote = Controller()
    monkeypatch.setattr(backend, "controller_remote", lambda c: remote)
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    started = _killing_runner(monkeypatch, remote)
    with pytest.raises(EnvironmentProblem) as stopped, cluster_lock(cluster, "burnin") as shared:
        result = execute(make_plan(cluster, plan_options([STAGE, LATER])), lock=shared)
    assert len(started) == 1 and result.lock_id is not None
    assert result.stopped["reason"].startswith("the cluster's lock on controller ctl01")
    assert stopped.value.exit_code == ExitCode.ENVIRONMENT
    assert stopped.value.message.startswith("kiln burnin lost the cluster's lock and stopped")


def test_no_run_starts_without_a_lock_its_caller_holds():
    """The runner takes no lock of its own: `lock` has no default, so a caller that holds none
    cannot start a run (each one takes the cluster's lock first: kiln.state.hold)."""
    import inspect

    parameter = inspect.signature(execute).parameters["lock"]
    assert parameter.default is inspect.Parameter.empty
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError):
        execute(None)  # type: ignore[call-arg]


# --- every command that changes the cluster takes the lock -------------------------------------


def _cli(argv: list[str]) -> int:
    from kiln.app import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code


@pytest.fixture
def held(tmp_path, monkeypatch):
    """A provision from another state dir holds the cluster's lock on the (local) controller;
    commands run from this one (KILN_HOME)."""
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    for path in (REPO / "inventories" / "example-h100").rglob("*"):
        target = inventory / path.relative_to(REPO / "inventories" / "example-h100")
        if path.is_dir():
            target.mkdir(exist_ok=True)
        else:
            target.write_text(path.read_text())
    with (inventory / "group_vars" / "all.yml").open("a") as handle:
        handle.write(f"\nkiln_state:\n  backend: controller\n  path: {tmp_path / 'ctl'}\n")
    monkeypatch.setattr(backend, "controller_remote", lambda c: LocalRemote("ctl01"))
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "here"))
    cluster = require_valid(inventory)
    holder = backend.SharedState(cluster, run_id="HOLDER", home=tmp_path / "there",
                                 command="provision")  # fmt: skip
    with holder:
        yield cluster
    assert controller.probe(LocalRemote(), str(tmp_path / "ctl")) is None


COMMANDS = {
    "provision": ["provision", "{inv}", "--yes"],
    "burnin": ["burnin", "{inv}", "--suite", "quick"],
    "slurm rotate-munge-key": ["slurm", "rotate-munge-key", "{inv}", "--yes"],
    "drain": ["drain", "{inv}", "{node}", "--reason", "replace DIMM B2"],
    "resume": ["resume", "{inv}", "{node}"],
    "unlock": ["unlock", "{inv}"],
    "unlock --force": ["unlock", "{inv}", "--force"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_that_changes_the_cluster_exits_3_naming_the_holder(
    name, held, tmp_path, capsys, monkeypatch
):
    touched: list[str] = []
    monkeypatch.setattr(engine, "init_runner", lambda **kw: touched.append("ansible"))
    node = held.compute[0].name
    argv = [a.format(inv=held.inventory_dir, node=node) for a in COMMANDS[name]]
    assert _cli(argv) == ExitCode.ENVIRONMENT
    said = capsys.readouterr().err
    assert "`kiln provision` by" in said and f"pid {os.getpid()}" in said, said
    assert "run HOLDER" in said and "ctl01" in said, said
    assert touched == []
    assert lock.read_lock(held.inventory_dir, tmp_path / "here") is None  # nothing left held
    runs = tmp_path / "here" / "runs"
    assert not runs.exists() or not any(runs.iterdir())  # no run was started


def test_unlock_force_takes_the_free_lock_for_an_instant_and_clears_a_killed_holders_record(
    tmp_path, monkeypatch, capsys
):
    where = tmp_path / "ctl"
    remote = Controller()
    doomed = controller.ControllerLock(remote, "/inv", run_id="DOOMED", directory=str(where))
    doomed.acquire()
    remote.kill_holder()
    doomed.release()
    inventory = tmp_path / "inventory"
    fleet(tmp_path)  # writes tmp_path/inv
    (tmp_path / "inv").rename(inventory)
    (inventory / "group_vars").mkdir(exist_ok=True)
    (inventory / "group_vars" / "all.yml").write_text(
        json.dumps({"kiln_state": {"backend": "controller", "path": str(where)}})
    )
    monkeypatch.setattr(backend, "controller_remote", lambda c: LocalRemote("ctl01"))
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    assert _cli(["unlock", str(inventory), "--force"]) == 0
    said = capsys.readouterr().err
    assert "cleared the record a killed run left" in said and "run DOOMED" in said, said
    assert (where / "holder.json").read_text() == ""
    assert controller.probe(LocalRemote(), str(where)) is None


def test_a_loss_during_a_quick_command_is_found_when_it_ends(tmp_path, monkeypatch):
    """drain and resume run no stage: the lock is asked once more when the body ends, so a
    loss during it still exits 3 (a lost lock never comes back)."""
    cluster = _on_controller(fleet(tmp_path), tmp_path / "ctl")
    remote = Controller()
    monkeypatch.setattr(backend, "controller_remote", lambda c: remote)
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    with cluster_lock(cluster, "resume", read=False):
        pass  # held to the end: no error
    with pytest.raises(EnvironmentProblem) as stopped, cluster_lock(cluster, "drain", read=False):
        remote.kill_holder()
    assert stopped.value.exit_code == ExitCode.ENVIRONMENT
    assert stopped.value.message.startswith("kiln drain lost the cluster's lock and stopped")
