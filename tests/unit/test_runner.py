"""kiln.runner: the ansible-runner boundary (patched), run records, the lock, retry selection,
and one fast real run over Ansible's local connection (no Docker)."""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kiln.errors import EnvironmentProblem, ExitCode, InvalidInputError
from kiln.inventory.batches import batches_needed, normalize_batch_size
from kiln.inventory.model import Cluster, Node
from kiln.plan import GeneratedFile, PlanOptions, make_plan
from kiln.plan import build as plan_build
from kiln.plan import model as plan_model
from kiln.plan.hostpattern import select_hosts
from kiln.plan.stages import STAGES, Stage, select_stages
from kiln.profiles import Versions
from kiln.records import lock
from kiln.records import runs as records
from kiln.runner import engine
from kiln.runner.events import EventRecorder, failure_message
from kiln.runner.execute import execute

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SMOKE = FIXTURES / "engine" / "smoke.yml"


# --- test doubles ------------------------------------------------------------------------------


def node(name: str, *groups: str) -> Node:
    """A compute node with no GPU; the render and export steps are patched (fake_runner)."""
    return Node(
        name=name,
        address="127.0.0.1",
        groups=tuple(groups or ("kiln_compute",)),
        is_controller=False,
        is_compute=True,
        rack="unracked",
        leaf_switch="leaf",
        gpu_model="none",
        gpu_count=0,
        sockets=1,
        cores_per_socket=1,
        threads_per_core=1,
        real_memory_mb=1024,
    )


def cluster(inventory: Path, names: list[str], batch_size="100%", max_fail=0) -> Cluster:
    """Compute nodes only, no controller: the Cluster model itself does not insist on one."""
    return Cluster.model_validate(
        {
            "name": "test",
            "inventory_dir": inventory,
            "nodes": [node(name) for name in names],
            "groups": {"kiln_compute": tuple(names)},
            "versions": Versions(driver_branch=550, cuda="12.4", nccl="2.21.5", slurm="22.05"),
            "partitions": (),
            "rollout": {"batch_size": batch_size, "max_fail_percentage": max_fail},
        }
    )


def plan_options(stages, **options) -> PlanOptions:
    return PlanOptions(stages=tuple(stages), **options)


def run_locked(plan, *, home: Path, run_id: str | None = None, **kwargs):
    """Execute `plan` under the local lock, taken first as a command takes the cluster's (the
    runner takes none of its own); refused, naming the holder, while another run holds it."""
    run_id = run_id or records.new_run_id()
    with lock.InventoryLock(plan.inventory_dir, run_id=run_id, home=home) as held:
        return execute(plan, lock=held, home=home, run_id=run_id, **kwargs)


def provision_run(cluster, options: PlanOptions, *, home: Path, listener=None) -> dict:
    """What `kiln provision` does: make the plan, execute it; the result as its JSON document."""
    plan = make_plan(cluster, options, home)
    return run_locked(plan, listener=listener, home=home).to_dict()


def ev(kind: str, counter: int = 0, **data) -> dict:
    return {"event": kind, "counter": counter, "created": "t", "event_data": data}


def stats(**counters) -> dict:
    keys = ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")
    return ev("playbook_on_stats", **{key: counters.get(key, {}) for key in keys})


class FakeRunner:
    """Stands in for ansible_runner's Runner: replays events into the event handler."""

    def __init__(self, kwargs: dict, events: list[dict], status="successful", rc=0) -> None:
        self.kwargs = kwargs
        self.events = events
        self.status, self.rc = status, rc
        artifact_dir = Path(kwargs["private_data_dir"]) / "artifacts" / kwargs["ident"]
        env = dict(os.environ)
        env.update(kwargs["envvars"])
        env.update({"ANSIBLE_STDOUT_CALLBACK": "awx_display", "AWX_ISOLATED_DATA_DIR": "x"})
        self.config = SimpleNamespace(env=env, artifact_dir=str(artifact_dir))

    def run(self) -> None:
        for event in self.events:
            assert self.kwargs["event_handler"](event) is False


@pytest.fixture
def fake_runner(monkeypatch):
    """Patch the one ansible_runner entry point; returns the list of runners started."""
    started: list[FakeRunner] = []
    script: dict = {"events": [], "status": "successful", "rc": 0}

    def init_runner(**kwargs):
        if script.get("calls"):  # one script per ansible-runner process, in order
            script.update(script["calls"].pop(0))
        runner = FakeRunner(kwargs, script["events"], script["status"], script["rc"])
        started.append(runner)
        return runner

    monkeypatch.setattr(engine, "init_runner", init_runner)
    exports: list[list[str]] = []

    def render_inventory(cluster, hosts=None):
        """The test doubles carry no hardware model: record what each export would hold."""
        names = hosts if hosts is not None else [n.name for n in cluster.nodes]
        exports.append(list(names))
        return json.dumps({"all": {"hosts": dict.fromkeys(names)}})

    monkeypatch.setattr(plan_model, "render_inventory", render_inventory)
    monkeypatch.setattr(plan_build, "render_files", lambda cluster: ())
    monkeypatch.setattr(
        plan_build, "render_etc_hosts", lambda cluster: GeneratedFile("hosts", "# test\n")
    )
    return SimpleNamespace(started=started, script=script, exports=exports)


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory"
    path.mkdir()
    return path


def request(tmp_path: Path, inventory: Path, **overrides) -> engine.PlaybookRequest:
    values = dict(
        playbook=SMOKE,
        inventory=inventory,
        private_data_dir=tmp_path / "run" / "base",
        ident="run-1",
        fact_cache=tmp_path / "fact_cache",
    )
    values.update(overrides)
    return engine.PlaybookRequest(**values)


# --- the ansible-runner boundary ---------------------------------------------------------------


def test_run_playbook_passes_exact_arguments(tmp_path, inventory, fake_runner, monkeypatch):
    monkeypatch.setenv("KILN_MITOGEN", "0")
    req = request(
        tmp_path,
        inventory,
        limit="@/abs/limit",
        check=True,
        diff=True,
        extravars={"kiln_batch_size": "25%"},
    )
    recorder = EventRecorder("base")
    engine.run_playbook(req, recorder, ["n1"])

    kwargs = fake_runner.started[0].kwargs
    assert kwargs["private_data_dir"] == str(tmp_path / "run" / "base")
    assert kwargs["playbook"] == str(SMOKE)
    assert kwargs["inventory"] == str(inventory)
    assert all(Path(kwargs[k]).is_absolute() for k in ("private_data_dir", "playbook", "inventory"))
    assert kwargs["ident"] == "run-1"
    assert kwargs["limit"] == "@/abs/limit"
    assert kwargs["cmdline"] == "--check --diff"
    assert kwargs["forks"] == 25
    assert kwargs["extravars"] == {"kiln_batch_size": "25%"}
    assert kwargs["event_handler"] is recorder
    assert kwargs["quiet"] is True
    assert kwargs["settings"] == {
        "fact_cache_type": "jsonfile",
        "fact_cache": str(tmp_path / "fact_cache"),
        "suppress_ansible_output": True,
    }
    env = kwargs["envvars"]
    assert env["ANSIBLE_FORKS"] == "25"
    assert env["ANSIBLE_PIPELINING"] == "True"
    assert env["ANSIBLE_SSH_ARGS"] == (
        "-o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=10 "
        "-o ServerAliveCountMax=3"
    )  # a host that hangs with the shared connection open is unreachable in about 30 s
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert env["ANSIBLE_GATHERING"] == "smart"
    # kiln's batched workers over Ansible's linear strategy (mitogen is off in this test)
    assert env["ANSIBLE_STRATEGY"] == "kiln_linear"
    assert env["ANSIBLE_STRATEGY_PLUGINS"] == str(engine.STRATEGY_DIR)
    assert (engine.STRATEGY_DIR / "kiln_linear.py").is_file()
    assert env["ANSIBLE_CONFIG"] == str(tmp_path / "run" / "base" / "ansible.cfg")
    # ansible-runner's stdout callback comes from kiln's directory, extending ansible-runner's own
    assert env["AWX_LIB_DIRECTORY"] == str(engine.CALLBACK_DIR)
    assert (engine.CALLBACK_DIR / "awx_display.py").is_file()
    assert Path(env["KILN_RUNNER_CALLBACK"]).name == "awx_display.py"
    assert Path(env["KILN_RUNNER_CALLBACK"]).is_file()


def test_mitogen_strategy_is_used_when_installed(tmp_path, inventory, monkeypatch):
    strategy = tmp_path / "ansible_mitogen" / "plugins" / "strategy"
    strategy.mkdir(parents=True)
    spec = SimpleNamespace(submodule_search_locations=[str(tmp_path / "ansible_mitogen")])
    monkeypatch.setattr(engine.importlib.util, "find_spec", lambda name: spec)
    settings = engine.ansible_settings(request(tmp_path, inventory))
    assert settings["ANSIBLE_STRATEGY"] == "kiln_mitogen_linear"
    assert settings["ANSIBLE_STRATEGY_PLUGINS"] == str(engine.STRATEGY_DIR)
    # without kiln's batched workers: mitogen's own strategy, then Ansible's
    monkeypatch.setenv("KILN_BATCH_WORKERS", "0")
    settings = engine.ansible_settings(request(tmp_path, inventory))
    assert settings["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert settings["ANSIBLE_STRATEGY_PLUGINS"] == str(strategy)
    monkeypatch.setenv("KILN_MITOGEN", "0")
    assert "ANSIBLE_STRATEGY" not in engine.ansible_settings(request(tmp_path, inventory))


def test_run_playbook_without_limit_or_check_omits_them(tmp_path, inventory, fake_runner):
    engine.run_playbook(request(tmp_path, inventory), EventRecorder("base"))
    kwargs = fake_runner.started[0].kwargs
    assert "limit" not in kwargs and "cmdline" not in kwargs


def test_relative_paths_are_refused(tmp_path, inventory, fake_runner):
    with pytest.raises(ValueError, match="absolute"):
        engine.run_playbook(request(tmp_path, Path("inventory")), EventRecorder("base"))
    assert fake_runner.started == []


def test_environment_is_allow_listed(tmp_path, inventory, fake_runner, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", "/home/me/vault")
    monkeypatch.setenv("KILN_SANDBOX", "1")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    engine.run_playbook(request(tmp_path, inventory), EventRecorder("base"))

    env = fake_runner.started[0].config.env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["ANSIBLE_VAULT_PASSWORD_FILE"] == "/home/me/vault"  # vault settings pass through
    assert env["KILN_SANDBOX"] == "1"
    assert env["SSH_AUTH_SOCK"] == "/tmp/agent.sock"
    assert env["HOME"] == os.environ["HOME"]
    assert env["ANSIBLE_STDOUT_CALLBACK"] == "awx_display"  # what ansible-runner sets stays
    assert env["ANSIBLE_PIPELINING"] == "True"
    extra = {k for k in env if k not in engine.ansible_settings(request(tmp_path, inventory))}
    extra -= {"ANSIBLE_STDOUT_CALLBACK", "AWX_ISOLATED_DATA_DIR"}
    allowed = (*engine.ENV_ALLOW, *engine.VAULT_ENV)
    assert all(k in allowed or k.startswith("KILN_") for k in extra), extra


# --- events -> results -------------------------------------------------------------------------


def test_recorder_builds_per_host_results_and_compact_log(tmp_path):
    log = (tmp_path / "events.jsonl").open("w")
    seen = []
    recorder = EventRecorder("base", log=log, progress=lambda s: seen.append(dict(s.counts)))
    events = [
        ev("playbook_on_play_start", 1, play="Base"),
        ev("playbook_on_task_start", 2, task="Install"),
        ev("runner_on_ok", 3, host="n1", task="Install", res={"changed": True}),
        ev(
            "runner_on_failed",
            4,
            host="n2",
            task="Install",
            res={"msg": "No package matching 'chrny'", "stdout": "x" * 10_000},
        ),
        ev("runner_on_unreachable", 5, host="n3", task="Install", res={"msg": "ssh: timeout"}),
        ev("runner_on_failed", 6, host="n1", task="Probe", ignore_errors=True, res={"msg": "meh"}),
        stats(
            ok={"n1": 2, "n2": 0},
            changed={"n1": 1},
            failures={"n2": 1},
            dark={"n3": 1},
            ignored={"n1": 1},
        ),
    ]
    assert all(recorder(event) is False for event in events)
    log.close()

    results = recorder.host_results(["n1", "n2", "n3", "n4"], stopped=False)
    assert {h: r.status for h, r in results.items()} == {
        "n1": "changed",
        "n2": "failed",
        "n3": "unreachable",
        "n4": "not_run",
    }
    assert results["n2"].failed_task == "Install"
    assert results["n2"].message == "No package matching 'chrny'"
    assert results["n3"].message == "ssh: timeout"
    assert results["n1"].message is None and results["n1"].ignored == 1
    assert seen[-1] == {"ok": 0, "changed": 1, "failed": 1, "unreachable": 1}

    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [line["event"] for line in lines][:3] == [
        "playbook_on_play_start",
        "playbook_on_task_start",
        "runner_on_ok",
    ]
    assert all(len(json.dumps(line)) < 400 for line in lines)  # no res payloads in the log


def test_failure_message_digs_into_loop_items():
    res = {
        "msg": "One or more items failed",
        "results": [{"failed": False}, {"failed": True, "msg": "bad item"}],
    }
    assert failure_message(res) == "bad item"
    assert failure_message({"rc": 3}) == "exit status 3"


def test_missing_stats_means_the_play_never_reached_its_recap(tmp_path, inventory, fake_runner):
    fake_runner.script.update(
        events=[
            ev("playbook_on_play_start", 1),
            ev("playbook_on_task_start", 2, task="T"),
            ev("runner_on_ok", 3, host="n1", task="T"),
        ],
        status="failed",
        rc=4,
    )
    summary = provision_run(
        cluster(inventory, ["n1", "n2"]),
        plan_options([Stage("base", str(SMOKE), "")]),
        home=tmp_path / "state",
    )
    stage = summary["stages"][0]
    assert stage["reached_recap"] is False
    assert stage["hosts"]["n1"]["status"] == "aborted"
    assert stage["hosts"]["n2"]["status"] == "not_run"
    assert "never reached its recap" in summary["stopped"]["reason"]
    assert summary["exit_code"] == ExitCode.FAILED


def test_threshold_stop_leaves_later_batches_untouched(tmp_path, inventory, fake_runner):
    fake_runner.script.update(
        events=[
            ev("playbook_on_play_start", 1),
            ev("runner_on_failed", 2, host="n1", task="T", res={"msg": "boom"}),
            ev("runner_on_ok", 3, host="n2", task="T"),
            ev("playbook_on_no_hosts_remaining", 4),
            stats(ok={"n2": 1}, failures={"n1": 1}),
        ],
        status="failed",
        rc=2,
    )
    stages = [Stage("preflight", str(SMOKE), ""), Stage("base", str(SMOKE), "")]
    summary = provision_run(
        cluster(inventory, ["n1", "n2", "n3", "n4"], batch_size=2),
        plan_options(stages),
        home=tmp_path / "state",
    )
    first = summary["stages"][0]
    assert first["stopped_by_failure_threshold"] is True
    assert (first["batches"], first["expected_batches"]) == (1, 2)
    assert {h: r["status"] for h, r in first["hosts"].items()} == {
        "n1": "failed",
        "n2": "aborted",
        "n3": "not_run",
        "n4": "not_run",
    }
    assert summary["stages"][1]["status"] == "skipped"
    assert summary["stopped_by_failure_threshold"] is True
    assert summary["failed_hosts"] == ["n1"]
    assert len(fake_runner.started) == 1
    assert fake_runner.started[0].kwargs["extravars"]["kiln_batch_size"] == "2"


def test_hosts_failing_a_stage_are_left_out_of_later_stages(tmp_path, inventory, fake_runner):
    fake_runner.script["calls"] = [
        dict(
            events=[
                ev("playbook_on_play_start", 1),
                ev(
                    "runner_on_failed",
                    2,
                    host="n2",
                    task="Compare",
                    res={"msg": "declares 8 GPUs (h100-sxm) but shows 7"},
                ),
                ev("runner_on_ok", 3, host="n1", task="Compare"),
                stats(ok={"n1": 1}, failures={"n2": 1}),
            ],
            status="failed",
            rc=2,
        ),
        dict(
            events=[
                ev("playbook_on_play_start", 1),
                ev("runner_on_ok", 2, host="n1", task="Install"),
                stats(ok={"n1": 1}),
            ],
            status="successful",
            rc=0,
        ),
    ]
    stages = [Stage("preflight", str(SMOKE), ""), Stage("base", str(SMOKE), "")]
    state = tmp_path / "state"
    summary = provision_run(
        cluster(inventory, ["n1", "n2"], max_fail=50),
        plan_options(stages),
        home=state,
    )
    base = fake_runner.started[1].kwargs
    assert base["limit"].startswith("@") and Path(base["limit"][1:]).read_text() == "n1\n"
    record = Path(summary["record"])
    assert (record / "failed_hosts").read_text() == "n2\n"
    assert (record / "unreachable_hosts").read_text() == ""
    assert summary["hosts"] == {
        "n1": {"preflight": "ok", "base": "ok"},
        "n2": {"preflight": "failed"},
    }
    assert (
        summary["stages"][0]["hosts"]["n2"]["message"] == "declares 8 GPUs (h100-sxm) but shows 7"
    )
    assert summary["exit_code"] == ExitCode.FAILED
    assert json.loads((record / "summary.json").read_text())["schema_version"] == 1


# --- retry-failed ------------------------------------------------------------------------------


def test_retry_failed_selects_failed_and_unreachable_of_last_run(tmp_path, inventory, fake_runner):
    state = tmp_path / "state"
    record = records.RunRecord.create(state, "20260101T000000Z-aaaaaa")
    record.write_summary({"failed_hosts": ["n2"], "unreachable_hosts": ["n4"]})
    record.mark_last(inventory)
    assert records.retry_hosts(inventory, state) == ["n2", "n4"]

    options = plan_options([Stage("base", str(SMOKE), "")], retry_failed=True)
    provision_run(cluster(inventory, ["n1", "n2", "n3", "n4"]), options, home=state)
    limit = fake_runner.started[0].kwargs["limit"]
    assert Path(limit[1:]).read_text() == "n2\nn4\n"


def test_retry_failed_without_a_previous_run_is_a_usage_error(tmp_path, inventory):
    with pytest.raises(InvalidInputError):
        records.retry_hosts(inventory, tmp_path / "state")


# --- the lock ----------------------------------------------------------------------------------


def test_second_lock_is_refused_naming_the_holder(tmp_path, inventory):
    state = tmp_path / "state"
    with lock.InventoryLock(inventory, home=state) as held:
        with pytest.raises(EnvironmentProblem) as refused:
            lock.InventoryLock(inventory, home=state).acquire()
        assert refused.value.exit_code == ExitCode.ENVIRONMENT
        assert f"pid {os.getpid()} on {socket.gethostname()}" in refused.value.message
        assert held.info.lock_id in refused.value.message
    assert lock.read_lock(inventory, state) is None


def _write_lock(inventory: Path, state: Path, **fields) -> None:
    path = lock.lock_path(inventory, state)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "lock_id": "dead0001",
        "pid": 999_999_999,
        "host": socket.gethostname(),
        "started": "2026-01-01T00:00:00+00:00",
        "inventory": str(inventory),
    }
    data.update(fields)
    path.write_text(json.dumps(data))


def test_stale_lock_of_a_dead_pid_on_this_host_is_cleared(tmp_path, inventory):
    state = tmp_path / "state"
    _write_lock(inventory, state)
    taken = lock.InventoryLock(inventory, home=state)
    taken.acquire()
    assert taken.cleared_stale.lock_id == "dead0001"
    taken.release()


def test_a_lock_file_without_a_live_holder_never_blocks(tmp_path, inventory):
    """The lock is the kernel's flock, not the file: what a dead run (of any host) left in the
    file is history, whatever it says."""
    state = tmp_path / "state"
    _write_lock(inventory, state, host="other-controller", pid=os.getpid())
    assert lock.read_lock(inventory, state) is None
    with lock.InventoryLock(inventory, home=state) as taken:
        assert taken.cleared_stale.host == "other-controller"


def test_provision_under_a_held_lock_touches_nothing(tmp_path, inventory, fake_runner):
    state = tmp_path / "state"
    with lock.InventoryLock(inventory, home=state), pytest.raises(EnvironmentProblem):
        provision_run(
            cluster(inventory, ["n1"]),
            plan_options([Stage("base", str(SMOKE), "")]),
            home=state,
        )
    assert fake_runner.started == []
    assert not (state / "runs").exists()


# --- small pure pieces -------------------------------------------------------------------------


def test_limit_patterns_follow_ansible_semantics():
    nodes = [
        node("ctl", "kiln_controllers"),
        node("gpu01", "kiln_compute", "rack_a"),
        node("gpu02", "kiln_compute", "rack_a"),
        node("gpu03", "kiln_compute", "rack_b"),
    ]
    assert select_hosts(nodes, None) == ["ctl", "gpu01", "gpu02", "gpu03"]
    assert select_hosts(nodes, "rack_a") == ["gpu01", "gpu02"]
    assert select_hosts(nodes, "kiln_compute:!gpu02") == ["gpu01", "gpu03"]
    assert select_hosts(nodes, "gpu0*,&rack_b") == ["gpu03"]
    assert select_hosts(nodes, "~gpu0[12]") == ["gpu01", "gpu02"]
    assert select_hosts(nodes, "!ctl") == ["gpu01", "gpu02", "gpu03"]


def test_batch_sizes():
    assert normalize_batch_size(25) == "25"
    assert normalize_batch_size("25%") == "25%"
    for bad in ("0", "0%", "101%", "-1", "abc", "25 percent"):
        with pytest.raises(InvalidInputError):
            normalize_batch_size(bad)
    assert batches_needed(10, "25%") == 5  # ansible: int(10 * 0.25) = 2 per batch
    assert batches_needed(10, "100%") == 1
    assert batches_needed(10, "3") == 4


def test_stage_selection_keeps_canonical_order(tmp_path):
    for stage in STAGES[:3]:
        (tmp_path / stage.playbook).write_text("---\n")
    assert [s.name for s in select_stages("nvidia,preflight", tmp_path)] == ["preflight", "nvidia"]
    with pytest.raises(InvalidInputError, match="not available"):
        select_stages("slurm", tmp_path)
    with pytest.raises(InvalidInputError, match="unknown"):
        select_stages("bsae", tmp_path)


def test_state_dir_follows_kiln_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    assert records.runs_home() == tmp_path / "home"
    monkeypatch.delenv("KILN_HOME")
    monkeypatch.chdir(tmp_path)
    assert records.runs_home() == tmp_path / ".kiln"


# --- a real run over the local connection ------------------------------------------------------


def local_cluster(
    path: Path,
    names: list[str],
    fail: tuple[str, ...] = (),
    racks: dict[str, str] | None = None,
    rollout: dict | None = None,
    controller: str | None = None,
):
    """A real validated Cluster whose hosts all use Ansible's local connection."""
    path.mkdir(parents=True, exist_ok=True)
    markers = path.parent / "markers"
    markers.mkdir(exist_ok=True)

    def host(name: str, index: int) -> dict:
        variables = {"kiln_gpu_model": "none", "ansible_host": f"127.0.0.{index + 2}"}
        variables["kiln_rack"] = (racks or {}).get(name, "r1")
        if name in fail:
            variables["smoke_fail"] = True
        return variables

    hosts = {name: host(name, i) for i, name in enumerate(names)}
    if controller:
        controllers = {controller: host(controller, 200)}
    else:  # kiln needs a controller: the first name plays it
        controllers = {names[0]: hosts.pop(names[0])}
    children = {"kiln_controllers": {"hosts": controllers}, "kiln_compute": {"hosts": hosts}}
    document = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "smoke_dir": str(markers),
            },
            "children": children,
        }
    }
    (path / "hosts.yml").write_text(json.dumps(document))
    if rollout:
        (path / "group_vars").mkdir(exist_ok=True)
        (path / "group_vars" / "all.yml").write_text(json.dumps({"kiln_rollout": rollout}))
    from kiln.inventory import require_valid

    return require_valid(path)


@pytest.mark.local
def test_real_local_run_flows_events_and_stats_end_to_end(tmp_path):
    names = ["n1", "n2", "n3"]
    real = local_cluster(tmp_path / "inv", names)
    state = tmp_path / "state"
    stages = [Stage("preflight", str(SMOKE), "")]
    updates = []

    class Listener:
        def stage_started(self, stage, hosts, batches):
            updates.append(("start", stage.name, tuple(hosts), batches))

        def progress(self, update):
            updates.append(("progress", update.task))

        def stage_finished(self, stage, result):
            updates.append(("done", result.status))

    first = provision_run(
        real,
        plan_options(stages),
        listener=Listener(),
        home=state,
    )
    assert first["exit_code"] == 0, first
    assert first["changed"] == 3  # the marker file, once per host
    assert {h: s["preflight"] for h, s in first["hosts"].items()} == dict.fromkeys(names, "changed")
    assert updates[0] == ("start", "preflight", tuple(names), 2)  # controller, then rack r1
    assert ("progress", "Write a marker file") in updates
    record = Path(first["record"])
    assert json.loads((record / "facts.json").read_text()) == {n: {"marker": n} for n in names}
    assert (record / "events.jsonl").stat().st_size > 0
    assert not list(record.glob("preflight/artifacts/*/job_events/*.json"))  # compact

    second = provision_run(real, plan_options(stages), home=state)
    assert second["exit_code"] == 0 and second["changed"] == 0


@pytest.mark.local
def test_real_run_sends_one_compact_event_per_host_task(tmp_path):
    """kiln's awx_display: no runner_on_start, ok results carry only `changed` (and a managed
    file's, package's or service's names), a failure keeps
    its whole result; per-host results, the recap and the displayed stdout are unchanged."""
    local_cluster(tmp_path / "inv", ["n1", "n2"], fail=("n2",))

    class Keeping(EventRecorder):
        def __init__(self) -> None:
            super().__init__("preflight")
            self.seen: list[dict] = []

        def __call__(self, event: dict) -> bool:
            self.seen.append(event)
            return super().__call__(event)

    recorder = Keeping()
    result = engine.run_playbook(
        request(
            tmp_path,
            tmp_path / "inv" / "hosts.yml",
            extravars={"kiln_max_fail_percentage": 100},
        ),
        recorder,
        ["n1", "n2"],
    )
    kinds = [event["event"] for event in recorder.seen]
    assert "runner_on_start" not in kinds
    oks = [e["event_data"] for e in recorder.seen if e["event"] == "runner_on_ok"]
    plain = [d for d in oks if d["task"] != "Write a marker file"]
    assert plain and all(set(data["res"]) == {"changed"} for data in plain)
    # a task that manages a file also carries what kiln.runner.manifest reads (kiln.drift)
    (marker,) = [d for d in oks if d["task"] == "Write a marker file"]
    assert marker["res"]["dest"].endswith("/n1") and "content" not in str(marker["res"])
    assert recorder.managed["n1"].to_dict()["files"] == [marker["res"]["dest"]]
    assert {(d["host"], d["task"], d["res"]["changed"]) for d in oks} >= {
        ("n1", "Say hello", False),
        ("n1", "Write a marker file", True),
    }
    (failed,) = [e["event_data"] for e in recorder.seen if e["event"] == "runner_on_failed"]
    assert failed["host"] == "n2" and failed["res"]["msg"] == "n2 was asked to fail"
    assert set(failed["res"]) > {"msg", "changed"}  # the whole result as ansible-runner sends it
    assert result.hosts["n1"].status == "changed" and result.hosts["n1"].ok == 3
    assert result.hosts["n2"].status == "failed"
    assert result.hosts["n2"].failed_task == "Fail where the inventory asks for it"
    assert result.artifact_data == {"kiln_preflight": {"n1": {"marker": "n1"}}}
    stdout = (result.artifact_dir / "stdout").read_text()
    assert "ok: [n1]" in stdout and "changed: [n1]" in stdout and "fatal: [n2]" in stdout
    assert not list(result.artifact_dir.glob("job_events/*"))  # no partial file left behind


@pytest.mark.local
def test_real_local_run_stops_at_the_failure_threshold(tmp_path):
    names = ["ctl", "n1", "n2", "n3", "n4"]
    real = local_cluster(
        tmp_path / "inv", names, fail=("n1",), rollout={"batch_size": 2, "max_fail_percentage": 0}
    )
    summary = provision_run(
        real,
        plan_options([Stage("preflight", str(SMOKE), "")]),
        home=tmp_path / "state",
    )
    stage = summary["stages"][0]
    assert summary["exit_code"] == 1
    assert stage["stopped_by_failure_threshold"] is True
    assert stage["hosts"]["n1"]["message"] == "n1 was asked to fail"
    assert stage["hosts"]["n3"]["status"] == "not_run"
    assert stage["hosts"]["n4"]["status"] == "not_run"
    assert summary["failed_hosts"] == ["n1"]
    assert not (tmp_path / "markers" / "n3").exists()


# --- the command layer -------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example-h100"


def run_cli(argv: list[str]) -> int:
    from kiln.app import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code


def test_provision_without_tty_or_yes_refuses_and_touches_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "state"))
    assert run_cli(["provision", str(EXAMPLE)]) == ExitCode.INVALID_INPUT
    assert "--yes" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()


def test_provision_of_a_bad_inventory_exits_2_before_anything(tmp_path, monkeypatch, fake_runner):
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "state"))
    bad = FIXTURES / "bad-inventories" / "duplicate-address"
    assert run_cli(["provision", str(bad), "--yes"]) == ExitCode.INVALID_INPUT
    assert fake_runner.started == []
    assert not (tmp_path / "state").exists()


def test_plain_progress_lines_when_stderr_is_not_a_tty(tmp_path, inventory, fake_runner, capsys):
    from kiln.commands._progress import StageDisplay as LiveDisplay

    fake_runner.script.update(
        events=[
            ev("playbook_on_play_start", 1),
            ev("playbook_on_task_start", 2, task="Install"),
            ev("runner_on_failed", 3, host="n1", task="Install", res={"msg": "no such package"}),
            stats(failures={"n1": 1}),
        ],
        status="failed",
        rc=2,
    )
    with LiveDisplay() as display:
        assert display.rich is False
        provision_run(
            cluster(inventory, ["n1"]),
            plan_options([Stage("base", str(SMOKE), "")]),
            listener=display,
            home=tmp_path / "state",
        )
    lines = [re.sub(r"^\d\d:\d\d:\d\d ", "", line) for line in capsys.readouterr().err.splitlines()]
    assert lines == [
        "base: 1 host(s) in 1 batch(es)",
        "base: task Install",
        "base: n1 failed: no such package",
        "base: failed (1 failed)",
    ]


# --- text from hosts is data; an exception anywhere fails the run ------------------------------


def _failing_events(message: str) -> list[dict]:
    return [
        ev("playbook_on_play_start", 1),
        ev("playbook_on_task_start", 2, task="Partition [disks]"),
        ev("runner_on_failed", 3, host="n1", task="Partition [disks]", res={"msg": message}),
        ev("runner_on_ok", 4, host="n2", task="Partition [disks]"),
        stats(ok={"n2": 1}, failures={"n1": 1}),
    ]


def test_host_message_with_markup_is_printed_as_data(tmp_path, inventory, fake_runner, capsys):
    """The crash of issue 18: `[/dev/sda]` in a host's error was read as a closing tag."""
    from kiln.commands._progress import StageDisplay as LiveDisplay
    from kiln.commands.provision import render_summary
    from kiln.runner.outcome import StageOutcome
    from kiln.runner.result import RunResult

    message = "mkfs failed on [/dev/sda]: [bold]busy[/] \x1b[31mred\x1b[0m\x07"
    fake_runner.script.update(events=_failing_events(message), status="failed", rc=2)
    with LiveDisplay() as display:
        summary = provision_run(
            cluster(inventory, ["n1", "n2"], max_fail=50),
            plan_options([Stage("base", str(SMOKE), "")]),
            listener=display,
            home=tmp_path / "state",
        )
    shown = "mkfs failed on [/dev/sda]: [bold]busy[/] red\\x07"
    assert any(
        line.endswith(f" base: n1 failed: {shown}") for line in capsys.readouterr().err.splitlines()
    )
    assert summary["failed_hosts"] == ["n1"] and summary["exit_code"] == ExitCode.FAILED
    result = RunResult(**{k: summary[k] for k in ("run_id", "inventory", "cluster", "record")},
                       check=False, limit=None, retry_failed=False, batch_size="100%",
                       max_fail_percentage=50, lock_id=None, cleared_stale_lock=None,
                       started="t", targets=["n1", "n2"],
                       stages=[StageOutcome.from_dict(s) for s in summary["stages"]])  # fmt: skip
    result.finish("t")
    render_summary(result)
    assert f"base: n1 failed at 'Partition [disks]': {shown}" in capsys.readouterr().out


class _MarkupListener:
    """The display as it was before issue 18: host text printed as rich markup."""

    def __init__(self) -> None:
        from io import StringIO

        from rich.console import Console

        self.console = Console(file=StringIO())

    def stage_started(self, stage, hosts, batches) -> None:
        pass

    def progress(self, update) -> None:
        if update.last_message:
            self.console.print(f"{update.last_host}: {update.last_message}")  # raises MarkupError

    def stage_finished(self, stage, result) -> None:
        pass


def test_an_exception_in_the_event_handler_fails_the_run_and_retry_retries(
    tmp_path, inventory, fake_runner
):
    """The handler keeps the first exception and goes on (the play is never left unwatched);
    the shard then fails: summary failed, every host of the stage in failed_hosts, later
    stages skipped, and `--retry-failed` runs those hosts again."""
    fake_runner.script.update(events=_failing_events("no [/dev/sda]"), status="failed", rc=2)
    stages = [Stage("base", str(SMOKE), ""), Stage("slurm", str(SMOKE), "")]
    state = tmp_path / "state"
    summary = provision_run(
        cluster(inventory, ["n1", "n2", "n3"], max_fail=50),
        plan_options(stages),
        listener=_MarkupListener(),
        home=state,
    )
    assert len(fake_runner.started) == 1  # the replay went on to the recap after the error
    assert summary["exit_code"] == ExitCode.FAILED
    assert summary["stopped"]["stage"] == "base"
    assert "kiln error: KilnCrash" in summary["stopped"]["reason"]
    assert "MarkupError" in summary["stopped"]["reason"]
    assert summary["failed_hosts"] == ["n1", "n2", "n3"]
    assert [(e["name"], e["status"]) for e in summary["stages"]] == [
        ("base", "error"),
        ("slurm", "skipped"),
    ]
    on_disk = json.loads((Path(summary["record"]) / "summary.json").read_text())
    assert on_disk["exit_code"] == ExitCode.FAILED
    assert "MarkupError" in (Path(summary["record"]) / "error.txt").read_text()
    assert records.retry_hosts(inventory, state) == ["n1", "n2", "n3"]

    fake_runner.script.update(events=[stats(ok={"n1": 1, "n2": 1, "n3": 1})], status="successful")
    options = plan_options(stages, retry_failed=True)
    again = provision_run(cluster(inventory, ["n1", "n2", "n3"]), options, home=state)
    limit = fake_runner.started[1].kwargs["limit"]
    assert Path(limit[1:]).read_text() == "n1\nn2\nn3\n"
    assert again["exit_code"] == ExitCode.OK


def test_an_exception_outside_ansible_fails_the_run_without_a_traceback(
    tmp_path, inventory, fake_runner, monkeypatch
):
    """A bug or a full disk between stages: the summary says failed and names the stage."""
    from kiln.runner import execute as execute_module

    calls = []

    def first_ok(request, recorder, hosts):
        calls.append(hosts)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        recorder(stats(ok=dict.fromkeys(hosts, 1)))
        return engine.PlaybookResult("successful", 0, recorder.stats,
                                     recorder.host_results(hosts, stopped=False), 1, False, {},
                                     request.private_data_dir)  # fmt: skip

    monkeypatch.setattr(execute_module.engine, "run_playbook", first_ok)
    stages = [Stage(name, str(SMOKE), "") for name in ("preflight", "base", "slurm")]
    summary = provision_run(
        cluster(inventory, ["n1", "n2"]), plan_options(stages), home=tmp_path / "state"
    )
    assert summary["hosts"]["n1"] == {"preflight": "ok", "base": "failed"}
    assert summary["stopped"]["stage"] == "base"
    assert "OSError" in summary["stopped"]["reason"]
    assert summary["failed_hosts"] == ["n1", "n2"]
    assert summary["exit_code"] == ExitCode.FAILED


def test_an_interrupt_fails_the_run_and_keeps_its_exit_code(
    tmp_path, inventory, fake_runner, monkeypatch
):
    from kiln.runner import execute as execute_module

    def interrupted(request, recorder, hosts):
        raise KeyboardInterrupt

    monkeypatch.setattr(execute_module.engine, "run_playbook", interrupted)
    state = tmp_path / "state"
    with pytest.raises(KeyboardInterrupt):
        provision_run(
            cluster(inventory, ["n1"]), plan_options([Stage("base", str(SMOKE), "")]), home=state
        )
    record = records.last_run(inventory, state)
    summary = json.loads(record.summary_path.read_text())
    assert summary["stopped"] == {"stage": "base", "reason": "interrupted"}
    assert summary["exit_code"] == ExitCode.INTERRUPTED
    assert summary["failed_hosts"] == ["n1"]
