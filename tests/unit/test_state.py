"""kiln.state and kiln.records.lock: the provision locks and the cluster's shared state.

The controller is stood in for by LocalRemote: the same shell commands kiln sends over SSH, run
by a local bash, so flock(1), the holder file, the heartbeat and the state merge are the real
ones. tests/unit/test_state_ssh.py runs them over a real sshd (local tier).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kiln.errors import EnvironmentProblem, ExitCode
from kiln.records import lock
from kiln.state import backend, controller
from kiln.state import cluster as doc
from kiln.state.remote import LocalRemote, RemoteUnavailable

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example-h100"


def _cluster(backend_name: str = "auto", path: str = "/var/lib/kiln/state"):
    from kiln.inventory import require_valid
    from kiln.inventory.schema import StateSpec

    cluster = require_valid(EXAMPLE)
    return cluster.model_copy(update={"state": StateSpec(backend=backend_name, path=path)})


# --- the local lock ---------------------------------------------------------------------------


def test_local_holder_is_named_and_freed_on_release(tmp_path):
    state = tmp_path / "state"
    with lock.InventoryLock(tmp_path, run_id="R1", home=state) as held:
        with pytest.raises(EnvironmentProblem) as refused:
            lock.InventoryLock(tmp_path, home=state).acquire()
        message = refused.value.message
        assert refused.value.exit_code == ExitCode.ENVIRONMENT
        for part in (held.info.user, f"pid {os.getpid()} on {socket.gethostname()}",
                     held.info.started, "run R1", held.info.lock_id):  # fmt: skip
            assert part in message
        assert lock.read_lock(tmp_path, state).lock_id == held.info.lock_id
    assert lock.read_lock(tmp_path, state) is None


def test_a_killed_holder_leaves_no_lock(tmp_path):
    state = tmp_path / "state"
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO / "cli")!r})
        from kiln.records.lock import InventoryLock
        InventoryLock({str(tmp_path)!r}, home=__import__("pathlib").Path({str(state)!r})).acquire()
        print("held", flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        assert lock.read_lock(tmp_path, state).pid == child.pid
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        child.kill()
    assert lock.read_lock(tmp_path, state) is None
    with lock.InventoryLock(tmp_path, home=state) as taken:
        assert taken.cleared_stale.pid == child.pid  # what it left is only history


def _taker(inventory, state, start, tried, results) -> None:
    start.wait()
    try:
        taken = lock.InventoryLock(inventory, home=state)
        taken.acquire()
    except EnvironmentProblem:
        results.put("refused")
        tried.wait()
        return
    results.put("won")
    tried.wait()  # hold until every taker has tried
    taken.release()


def test_racing_takers_of_a_stale_lock_never_make_two_holders(tmp_path, monkeypatch):
    """100 trials of 6 processes taking a lock a dead run left behind, all at once: exactly
    one holder every time (the old O_EXCL-and-unlink takeover left two in 2 of 8)."""
    monkeypatch.setattr(lock, "PROBE_GRACE_S", 0.0)  # one try each: the sharpest race
    context = multiprocessing.get_context("fork")
    state = tmp_path / "state"
    takers = 6
    for trial in range(100):
        path = lock.lock_path(tmp_path.resolve(), state)
        path.parent.mkdir(parents=True, exist_ok=True)
        stale = {"lock_id": f"dead{trial}", "pid": 999_999_999, "host": socket.gethostname(),
                 "started": "2026-01-01T00:00:00+00:00", "inventory": str(tmp_path)}  # fmt: skip
        path.write_text(json.dumps(stale))
        start, tried = context.Barrier(takers), context.Barrier(takers)
        results = context.Queue()
        workers = [
            context.Process(target=_taker, args=(tmp_path, state, start, tried, results))
            for _ in range(takers)
        ]
        for worker in workers:
            worker.start()
        outcomes = sorted(results.get(timeout=20) for _ in workers)
        for worker in workers:
            worker.join(20)
        assert outcomes == ["refused"] * (takers - 1) + ["won"], f"trial {trial}: {outcomes}"


# --- the controller's lock (a LocalRemote stands in for SSH) ----------------------------------


def test_second_taker_on_the_controller_exits_3_naming_the_holder(tmp_path):
    remote, where = LocalRemote("ctl"), str(tmp_path / "kiln")
    first = controller.ControllerLock(remote, "/inv", run_id="RUN-1", directory=where)
    first.acquire()
    try:
        with pytest.raises(EnvironmentProblem) as refused:
            controller.ControllerLock(remote, "/inv", run_id="RUN-2", directory=where).acquire()
        assert refused.value.exit_code == ExitCode.ENVIRONMENT
        message = refused.value.message
        assert "run RUN-1" in message and f"pid {os.getpid()}" in message
        assert first.info.user in message and first.info.started in message
        assert controller.probe(remote, where).run_id == "RUN-1"
    finally:
        first.release()
    assert controller.probe(remote, where) is None
    second = controller.ControllerLock(remote, "/inv", run_id="RUN-2", directory=where)
    second.acquire()
    second.release()


def test_the_controller_lock_dies_with_its_holder_process(tmp_path):
    """kiln killed (-9): the channel closes, the remote shell reads EOF, the flock is gone."""
    where = str(tmp_path / "kiln")
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO / "cli")!r})
        from kiln.state.controller import ControllerLock
        from kiln.state.remote import LocalRemote
        ControllerLock(LocalRemote(), "/inv", run_id="DOOMED", directory={where!r}).acquire()
        print("held", flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        assert controller.probe(LocalRemote(), where).run_id == "DOOMED"
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        child.kill()
    deadline = time.monotonic() + 10
    while controller.probe(LocalRemote(), where) is not None:
        assert time.monotonic() < deadline, "the lock outlived its holder"
        time.sleep(0.1)


def test_a_holder_gone_silent_loses_the_lock_after_its_ttl(tmp_path):
    """A connection lost without a FIN: no heartbeat for TTL seconds frees the lock."""
    remote, where = LocalRemote(), str(tmp_path / "kiln")
    silent = controller.ControllerLock(remote, "/inv", directory=where, ttl=1, heartbeat=3600)
    silent.acquire()
    try:
        time.sleep(1.8)
        assert controller.probe(remote, where) is None
    finally:
        silent.release()
    beating = controller.ControllerLock(remote, "/inv", directory=where, ttl=1, heartbeat=0.2)
    beating.acquire()
    try:
        time.sleep(1.8)
        assert controller.probe(remote, where) is not None
    finally:
        beating.release()


def test_an_unwritable_state_directory_is_unavailable_not_held(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(controller.StateUnavailable) as unavailable:
        controller.ControllerLock(
            LocalRemote("ctl"), "/inv", directory=str(blocker / "x")
        ).acquire()
    assert "cannot write" in unavailable.value.message


def test_state_updates_merge_per_node_and_keep_the_first_join(tmp_path):
    remote, where = LocalRemote(), str(tmp_path / "kiln")
    assert controller.read_state(remote, where) == {}
    controller.update_state(remote, {"nodes": {"n1": {"joined": "t1", "last_run": "A"}}}, where)
    controller.update_state(remote, doc.verdict_patch({"n1": "pass"}, "B1", "t2"), where)
    controller.update_state(remote, {"nodes": {"n1": {"joined": "t3", "last_run": "C"}}}, where)
    node = controller.read_state(remote, where)["nodes"]["n1"]
    assert node == {"joined": "t1", "last_run": "C",
                    "verdict": {"result": "pass", "run": "B1", "at": "t2"}}  # fmt: skip
    assert oct(os.stat(where).st_mode & 0o777) == "0o700"


def test_a_node_the_inventory_dropped_is_forgotten_and_joins_again_as_new(tmp_path):
    """The node left the cluster (removed from the inventory, provisioned without it): when it
    comes back it must be new again, quarantined until burn-in passes, not "joined"."""
    remote, where = LocalRemote(), str(tmp_path / "kiln")
    both = {"n1": {"joined": "t1"}, "n2": {"joined": "t1"}}
    controller.update_state(remote, {"nodes": both}, where)
    summary = {
        "run_id": "R", "finished": "t2", "exit_code": 0,
        "stages": [{"name": "slurm", "status": "ok"}], "hosts": {"n1": {"slurm": "ok"}},
    }  # fmt: skip
    controller.update_state(remote, doc.run_patch(summary, {}, "me", "c", ["n1"]), where)
    state = controller.read_state(remote, where)
    assert doc.joined_nodes(state) == {"n1"} and "members" not in state
    # Without a member list (a verdict, an older kiln) nothing is forgotten.
    controller.update_state(remote, doc.verdict_patch({"n1": "pass"}, "B", "t3"), where)
    assert doc.joined_nodes(controller.read_state(remote, where)) == {"n1"}


def test_run_patch_joins_only_nodes_through_every_stage():
    summary = {
        "run_id": "R", "check": False, "finished": "T", "exit_code": 1,
        "stages": [{"name": "refresh", "status": "ok"}, {"name": "base", "status": "failed"},
                   {"name": "slurm", "status": "ok"}],
        "hosts": {"good": {"refresh": "ok", "base": "changed", "slurm": "ok"},
                  "bad": {"base": "ok", "slurm": "unreachable"}},
    }  # fmt: skip
    patch = doc.run_patch(summary, {"slurm": "24.11"}, "me@here", "c")
    assert patch["nodes"]["good"]["joined"] == "T"
    assert patch["nodes"]["good"]["versions"] == {"slurm": "24.11"}
    assert "joined" not in patch["nodes"]["bad"]
    assert patch["nodes"]["bad"]["last_result"] == "unreachable"
    assert patch["last_run"] == {"id": "R", "result": "failed", "finished": "T", "by": "me@here"}
    assert doc.run_patch({**summary, "check": True}, {}, "me", "c") is None
    assert doc.joined_nodes({"nodes": patch["nodes"]}) == {"good"}


# --- the backend: SharedState ------------------------------------------------------------------


def _unreachable(cluster):
    raise RemoteUnavailable("ctl01 unreachable: port 22: Connection refused")


class NoSudoRemote(LocalRemote):
    """A controller that answers over SSH, but whose login user cannot create the state
    directory (not root, and sudo asks for a password): every lock or state command fails as
    sudo does; the presence check (run as the login user, no sudo) is the real script."""

    def open(self, command: str):
        if "exec sudo -n" in command:
            return super().open("echo 'sudo: a password is required'; exit 1")
        return super().open(command)


class SilentLockRemote(LocalRemote):
    """A controller that answers, but whose lock request times out (a busy machine)."""

    def open(self, command: str):
        if controller.TAKEN in command:
            raise TimeoutError("no answer in 30 s")
        return super().open(command)


def _slurm_run(state: Path, inventory: Path, slurm: str = "ok", check: bool = False) -> None:
    """A run record in `state`: one node taken through (or failed at) the slurm stage."""
    run = state / "runs" / "20261201T000000Z-abcdef"
    run.mkdir(parents=True)
    summary = {"run_id": run.name, "inventory": str(inventory.resolve()), "check": check,
               "stages": [{"name": "base", "status": "ok"}, {"name": "slurm", "status": slurm}],
               "hosts": {"gpu0001": {"base": "ok", "slurm": slurm}}}  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary))


def _refused(shared) -> str:
    with pytest.raises(EnvironmentProblem) as refused:
        shared.acquire()
    assert refused.value.exit_code == ExitCode.ENVIRONMENT
    assert lock.read_lock(EXAMPLE, shared.home) is None  # the local lock was let go too
    return f"{refused.value.message} | {refused.value.hint}"


def test_auto_never_falls_back_when_the_controller_does_not_answer(tmp_path):
    """A transient SSH failure to the controller (fresh runner, no record here): exit 3,
    never a local lock that a second runner on another machine could also take."""
    said = _refused(backend.SharedState(_cluster(), home=tmp_path, remote_factory=_unreachable))
    assert "cannot reach the controller's lock" in said and "Connection refused" in said
    assert "retry" in said and "kiln_state.backend: local" in said


def test_auto_never_falls_back_when_the_lock_request_times_out(tmp_path):
    cluster = _cluster("auto", str(tmp_path / "ctl" / "state"))
    said = _refused(backend.SharedState(
        cluster, home=tmp_path / "a", remote_factory=lambda c: SilentLockRemote("ctl01")
    ))  # fmt: skip
    assert "cannot reach the controller's lock" in said


def test_auto_falls_back_only_for_a_first_bring_up(tmp_path):
    """The controller answers, has no state directory and cannot make one, and no run here
    took the inventory through slurm: the local lock, said with why."""
    where = tmp_path / "ctl" / "var-lib-kiln" / "state"
    cluster = _cluster("auto", str(where))
    factory = lambda c: NoSudoRemote("ctl01")  # noqa: E731
    _slurm_run(tmp_path / "a", EXAMPLE, slurm="failed")  # reached slurm, joined nothing
    with backend.SharedState(cluster, home=tmp_path / "a", remote_factory=factory) as shared:
        assert shared.backend == "local" and shared.controller is None
        assert "a password is required" in shared.notes[0]
        assert "first bring-up" in shared.notes[0]
        assert lock.read_lock(EXAMPLE, tmp_path / "a") is not None
    assert lock.read_lock(EXAMPLE, tmp_path / "a") is None
    assert not where.exists() and not where.parent.exists()  # the check created nothing


def test_auto_refuses_the_fallback_once_a_run_here_took_the_cluster_through_slurm(tmp_path):
    cluster = _cluster("auto", str(tmp_path / "ctl" / "state"))
    _slurm_run(tmp_path / "a", EXAMPLE, slurm="changed")
    said = _refused(backend.SharedState(
        cluster, home=tmp_path / "a", remote_factory=lambda c: NoSudoRemote("ctl01")
    ))  # fmt: skip
    assert "run 20261201T000000Z-abcdef took this inventory through the slurm stage" in said
    assert "kiln_state.backend: local" in said
    # A check run (--check) changed nothing: it does not count as a bring-up.
    assert backend.brought_up(EXAMPLE, tmp_path / "b") is None
    _slurm_run(tmp_path / "b", EXAMPLE, check=True)
    assert backend.brought_up(EXAMPLE, tmp_path / "b") is None


def test_auto_refuses_the_fallback_when_the_state_directory_exists(tmp_path):
    """The directory is there (another runner made it, or holds the lock in it) but this
    runner cannot use it: exit 3, whatever the local records say."""
    where = tmp_path / "ctl" / "state"
    where.mkdir(parents=True)
    said = _refused(backend.SharedState(
        _cluster("auto", str(where)), home=tmp_path / "a",
        remote_factory=lambda c: NoSudoRemote("ctl01"),
    ))  # fmt: skip
    assert "exists there" in said and "a password is required" in said


@pytest.mark.parametrize(
    ("layout", "absent"),
    [("nothing", True), ("dir", False), ("file", False), ("under-a-file", False)],
)
def test_the_presence_check_says_absent_only_when_it_is_sure(tmp_path, layout, absent):
    where = tmp_path / "var" / "kiln" / "state"
    if layout == "dir":
        where.mkdir(parents=True)
    elif layout == "file":
        where.parent.mkdir(parents=True)
        where.write_text("")
    elif layout == "under-a-file":
        where.parent.parent.mkdir(parents=True)
        where.parent.write_text("")
    assert controller.state_dir_absent(LocalRemote(), str(where) + "/") is absent


@pytest.mark.skipif(os.geteuid() == 0, reason="root searches any directory")
def test_the_presence_check_cannot_see_through_an_unsearchable_parent(tmp_path):
    closed = tmp_path / "kiln"
    (closed / "state").mkdir(parents=True)
    closed.chmod(0o600)
    try:
        assert controller.state_dir_absent(LocalRemote(), str(closed / "state")) is False
        assert controller.state_dir_absent(LocalRemote(), str(closed / "other")) is False
    finally:
        closed.chmod(0o700)


def test_backend_controller_refuses_an_unreachable_controller(tmp_path):
    shared = backend.SharedState(_cluster("controller"), home=tmp_path, remote_factory=_unreachable)
    with pytest.raises(EnvironmentProblem) as refused:
        shared.acquire()
    assert refused.value.exit_code == ExitCode.ENVIRONMENT
    assert lock.read_lock(EXAMPLE, tmp_path) is None  # the local lock was let go too


def test_backend_local_never_contacts_the_controller(tmp_path):
    with backend.SharedState(
        _cluster("local"), home=tmp_path, remote_factory=lambda c: pytest.fail("contacted")
    ) as shared:
        assert shared.backend == "local"


def test_two_state_dirs_one_controller_only_one_run(tmp_path):
    """Two runners (two state dirs), one cluster: the second exits 3 naming the first."""
    cluster = _cluster("auto", str(tmp_path / "ctl-state"))
    factory = lambda c: LocalRemote("ctl01")  # noqa: E731
    with backend.SharedState(cluster, run_id="FIRST", home=tmp_path / "a",
                             remote_factory=factory) as first:  # fmt: skip
        assert first.backend == "controller" and first.info.run_id == "FIRST"
        second = backend.SharedState(
            cluster, run_id="SECOND", home=tmp_path / "b", remote_factory=factory
        )
        with pytest.raises(EnvironmentProblem) as refused:
            second.acquire()
        assert "run FIRST" in refused.value.message
        assert lock.read_lock(EXAMPLE, tmp_path / "b") is None
        status = backend.lock_status(cluster, tmp_path / "b", remote_factory=factory)
        assert status.controller.run_id == "FIRST" and status.local is None
    with backend.SharedState(cluster, home=tmp_path / "b", remote_factory=factory):
        pass


def test_a_fresh_runner_reads_the_joined_nodes_from_the_controller(tmp_path):
    cluster = _cluster("controller", str(tmp_path / "ctl-state"))
    factory = lambda c: LocalRemote("ctl01")  # noqa: E731
    summary = {"run_id": "R", "check": False, "finished": "T", "exit_code": 0,
               "stages": [{"name": "base", "status": "ok"}],
               "hosts": {"gpu001": {"base": "ok"}}}  # fmt: skip
    with backend.SharedState(cluster, home=tmp_path / "a", remote_factory=factory) as first:
        first.push_run(summary)
    with backend.SharedState(cluster, home=tmp_path / "fresh", remote_factory=factory) as again:
        assert again.joined() == {"gpu001"}


def _cli(argv: list[str]) -> int:
    from kiln.app import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code


def test_unlock_shows_the_holder_and_force_never_breaks_a_live_lock(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KILN_HOME", str(tmp_path))
    monkeypatch.setattr(backend, "controller_remote", _unreachable)
    assert _cli(["unlock", str(EXAMPLE)]) == 0
    assert "is not locked" in capsys.readouterr().err
    # --force takes the lock for an instant: with the controller unreachable it cannot be
    # sure no run holds it there, so it clears nothing and says why
    assert _cli(["unlock", str(EXAMPLE), "--force"]) == ExitCode.ENVIRONMENT
    assert "cannot reach the controller's lock" in capsys.readouterr().err
    with lock.InventoryLock(EXAMPLE, run_id="LIVE", home=tmp_path):
        assert _cli(["unlock", str(EXAMPLE)]) == ExitCode.ENVIRONMENT
        assert "run LIVE" in capsys.readouterr().err
        assert _cli(["unlock", str(EXAMPLE), "--force"]) == ExitCode.ENVIRONMENT
        assert "cannot clear" in capsys.readouterr().err
        assert lock.read_lock(EXAMPLE, tmp_path).run_id == "LIVE"
