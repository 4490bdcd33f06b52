"""Sharded rollouts: planning, the ansible-runner boundary per shard (patched), the failure
threshold across shards, merged summaries, retry across shards, --new-nodes selection, worker
controllers (ssh argv, streamed kwargs, a real local `ansible-runner worker`), and a real run of
two shards in parallel over Ansible's local connection."""

from __future__ import annotations

import json
import shlex
import sys
import threading
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_runner import SMOKE, FakeRunner, ev, local_cluster, plan_options, provision_run, stats

from kiln.plan import build as plan_build
from kiln.plan import make_plan, shards
from kiln.plan.stages import REFRESH, Stage
from kiln.records import runs as records
from kiln.runner import engine, stream, workers
from kiln.runner import execute as runner_execute
from kiln.runner import merge as stage_merge
from kiln.runner.events import (
    CappedLog,
    EventRecorder,
    HostResult,
    ProgressAggregator,
    StageProgress,
)
from kiln.runner.outcome import ShardOutcome

STAGE = Stage("base", str(SMOKE), "")
RACKS = {"a1": "ra", "a2": "ra", "b1": "rb", "b2": "rb", "c1": "rc", "c2": "rc"}


def fleet(tmp_path: Path, **rollout):
    # one shard per rack unless a test says otherwise: three compute shards to stop between
    rollout.setdefault("shard_by", "rack")
    names = list(RACKS)
    return local_cluster(tmp_path / "inv", names, racks=RACKS, rollout=rollout, controller="ctl")


@pytest.fixture
def runner(monkeypatch):
    """Patched ansible_runner: each process plays the hosts of its limit file; `outcome` maps a
    host to failed/unreachable (default ok). Records every process's kwargs."""
    started: list[dict] = []
    outcome: dict[str, str] = {}
    lock = threading.Lock()

    def init_runner(**kwargs):
        hosts = Path(kwargs["limit"][1:]).read_text().split()
        events = [ev("playbook_on_play_start", 1), ev("playbook_on_task_start", 2, task="T")]
        counters: dict[str, dict[str, int]] = {"ok": {}, "failures": {}, "dark": {}}
        for i, host in enumerate(hosts):
            kind = outcome.get(host, "ok")
            name = {"ok": "runner_on_ok", "failed": "runner_on_failed"}.get(
                kind, "runner_on_unreachable"
            )
            events.append(ev(name, 3 + i, host=host, task="T", res={"msg": f"{host} {kind}"}))
            counters[{"ok": "ok", "failed": "failures"}.get(kind, "dark")][host] = 1
        bad = any(outcome.get(h) for h in hosts)
        if bad:
            events.append(ev("playbook_on_no_hosts_remaining", 90))
        events.append(stats(**counters))
        fake = FakeRunner(kwargs, events, "failed" if bad else "successful", 2 if bad else 0)
        with lock:
            started.append(kwargs)
        return fake

    monkeypatch.setattr(engine, "init_runner", init_runner)
    return SimpleNamespace(started=started, outcome=outcome)


def limit_hosts(kwargs: dict) -> list[str]:
    return Path(kwargs["limit"][1:]).read_text().split()


def record_inventory_hosts(record: Path, shard: str) -> list[str]:
    """The hosts of a shard's inventory, from the (redacted) copy its run record keeps."""
    return list(json.loads((record / "shards" / shard / "hosts.json").read_text())["all"]["hosts"])


# --- planning ----------------------------------------------------------------------------------


def test_plan_by_rack_puts_controllers_first_alone(tmp_path):
    cluster = fleet(tmp_path)
    planned = shards.plan_shards(cluster, ["ctl", *RACKS], shard_by="rack")
    assert [(s.name, s.hosts, s.controllers) for s in planned] == [
        ("controllers", ("ctl",), True),
        ("rack-ra", ("a1", "a2"), False),
        ("rack-rb", ("b1", "b2"), False),
        ("rack-rc", ("c1", "c2"), False),
    ]


def test_plan_by_rack_group_packs_whole_racks_up_to_the_shard_size(tmp_path):
    cluster = fleet(tmp_path)
    hosts = ["ctl", *RACKS]
    # the default: racks in inventory order, whole, at most shard_size hosts a shard
    assert [(s.name, s.hosts) for s in shards.plan_shards(cluster, hosts)] == [
        ("controllers", ("ctl",)),
        ("racks-ra-rc", ("a1", "a2", "b1", "b2", "c1", "c2")),
    ]
    planned = shards.plan_shards(cluster, hosts, shard_by="rack_group", shard_size=5)
    assert [(s.name, s.hosts) for s in planned[1:]] == [
        ("racks-ra-rb", ("a1", "a2", "b1", "b2")),  # rc would make 6
        ("rack-rc", ("c1", "c2")),
    ]
    # a rack larger than shard_size is a shard of its own, never split
    planned = shards.plan_shards(cluster, hosts, shard_by="rack_group", shard_size=1)
    assert [s.name for s in planned[1:]] == ["rack-ra", "rack-rb", "rack-rc"]
    assert planned[1].hosts == ("a1", "a2")


def test_parallel_shards_fit_the_controllers_memory_at_most_one_per_core():
    # an explicit max_parallel_shards wins; no more than there are shards
    assert shards.parallel_limit(3, 100, cpu_count=64, memory_gib=2) == 3
    assert shards.parallel_limit(0, 4, cpu_count=64) == 4
    # 0: one per core, within the memory budget: kiln's own 128 MiB, then 90 MiB + 15 MiB a
    # fork per running shard
    assert shards.shard_memory_mib(25) == 465
    assert shards.parallel_limit(0, 100, cpu_count=64, forks=25, memory_gib=2) == 4  # 1,860 MiB
    assert shards.parallel_limit(0, 100, cpu_count=64, forks=15, memory_gib=2) == 6
    assert shards.parallel_limit(0, 100, cpu_count=4, forks=25, memory_gib=64) == 4
    assert shards.parallel_limit(0, 100, cpu_count=64, forks=25, memory_gib=0.1) == 1
    # the budget is per machine that runs shards: each worker controller has its own
    assert shards.parallel_limit(0, 100, cpu_count=64, forks=25, memory_gib=2, machines=3) == 12


def test_plan_by_count_and_workers_round_robin(tmp_path):
    cluster = fleet(tmp_path)
    planned = shards.plan_shards(
        cluster, ["ctl", *RACKS], shard_by="count", shard_size=4, workers=("w1", "w2")
    )
    assert [(s.name, s.hosts, s.worker) for s in planned] == [
        ("controllers", ("ctl",), None),  # the controllers always run here
        ("part-001", ("a1", "a2", "b1", "b2"), "w1"),
        ("part-002", ("c1", "c2"), "w2"),
    ]
    assert shards.parallel_limit(0, 10, cpu_count=64) == 10
    assert shards.parallel_limit(0, 100, cpu_count=64) == 64
    assert shards.parallel_limit(3, 100, cpu_count=64) == 3


def test_threshold_is_judged_over_the_whole_stage():
    def entry(statuses: dict[str, str], stopped=False) -> ShardOutcome:
        hosts = {h: HostResult(h, s) for h, s in statuses.items()}
        return ShardOutcome(
            "p", "successful", hosts, stopped_by_failure_threshold=stopped, reached_recap=True
        )

    entries = [entry({"a1": "failed", "a2": "aborted"}, stopped=True), entry({"b1": "ok"})]
    merge = stage_merge.StageMerge("base", "base.yml", [])
    for done in entries:
        merge.add(done)
    assert merge.failed_share(4) == 25.0
    assert stage_merge.crosses_threshold(merge.failed_share(4), 20) is True
    assert stage_merge.crosses_threshold(merge.failed_share(4), 25) is False  # strictly more than
    assert stage_merge.held_back(entries[0]) == {"a1", "a2"}  # a stopped shard's unfinished hosts
    assert stage_merge.held_back(entry({"b1": "ok", "b2": "not_run"})) == set()


def test_stage_merge_keeps_running_counts_as_shards_finish():
    """The stop rule reads counts kept as each shard is added, equal to the full recount."""

    def entry(name: str, statuses: dict[str, str], status="successful", recap=True):
        hosts = {h: HostResult(h, s) for h, s in statuses.items()}
        return ShardOutcome(name, status, hosts, reached_recap=recap)

    merge = stage_merge.StageMerge("base", "base.yml", [])
    finished = [
        entry("p1", {"a1": "ok", "a2": "failed"}),
        entry("p2", {"b1": "unreachable", "b2": "changed"}),
        entry("p3", {"c1": "not_run"}, status="failed", recap=False),
        entry("p4", {"d1": "failed"}, status="canceled", recap=False),
    ]
    for done in finished:
        merge.add(done)
        recount = sum(stage_merge.bad_hosts(e) for e in merge.shard_entries)
        assert merge.failed_share(10) == stage_merge.failed_share(recount, 10)
    assert merge.bad == 3 and merge.failed_share(0) == 0.0
    assert merge.trouble is finished[2]  # the first shard that never reached its recap


# --- provision through shards (ansible_runner patched) -------------------------------------------


def test_each_shard_gets_its_own_inventory_and_limit(tmp_path, runner):
    cluster = fleet(tmp_path)
    summary = provision_run(cluster, plan_options([STAGE]), home=tmp_path / "state")
    assert summary["exit_code"] == 0, summary["stopped"]
    started = runner.started
    assert limit_hosts(started[0]) == ["ctl"]  # first, and alone
    assert sorted(limit_hosts(k)[0] for k in started[1:]) == ["a1", "b1", "c1"]
    by_shard = {k["extravars"]["kiln_shard"]: k for k in started}
    record = Path(summary["record"])
    assert record_inventory_hosts(record, "controllers") == ["ctl"]
    assert record_inventory_hosts(record, "rack-rb") == ["ctl", "b1", "b2"]  # own + controllers
    assert limit_hosts(by_shard["rack-rb"]) == ["b1", "b2"]
    assert by_shard["rack-rb"]["private_data_dir"] == str(record / "base" / "rack-rb")
    # Ansible read a private copy outside the record (it holds the secrets), gone after the run
    used = Path(by_shard["rack-rb"]["inventory"])
    assert record not in used.parents and not used.exists()
    assert by_shard["rack-rb"]["extravars"]["slurm_common_rendered_dir"] == str(record / "files")

    stage = summary["stages"][0]
    assert [s["name"] for s in stage["shards"]] == ["controllers", "rack-ra", "rack-rb", "rack-rc"]
    assert stage["shards"][2]["hosts"] == ["b1", "b2"]
    assert stage["shards"][2]["counts"] == {"ok": 2}
    assert list(stage["hosts"]) == ["ctl", *RACKS]  # one per-host map, in target order
    assert (stage["batches"], stage["expected_batches"]) == (4, 4)
    assert stage["status"] == "successful" and stage["shards_not_started"] == []
    lines = [json.loads(x) for x in (record / "events.jsonl").read_text().splitlines()]
    assert {x["shard"] for x in lines if x["event"] == "runner_on_ok"} == {
        "controllers",
        "rack-ra",
        "rack-rb",
        "rack-rc",
    }
    assert summary["events"]["dropped"] == 0


def test_forks_per_shard_come_from_the_inventory_unless_overridden(tmp_path, runner):
    cluster = fleet(tmp_path, forks=15)
    provision_run(cluster, plan_options([STAGE]), home=tmp_path / "s1")
    assert {k["forks"] for k in runner.started} == {15}
    runner.started.clear()
    options = plan_options([STAGE], forks=7)
    provision_run(cluster, options, home=tmp_path / "s2")
    assert {k["forks"] for k in runner.started} == {7}
    runner.started.clear()
    default = fleet(tmp_path / "d")
    provision_run(default, plan_options([STAGE]), home=tmp_path / "s3")
    assert {k["forks"] for k in runner.started} == {25}  # the default


def test_a_shard_over_its_threshold_stops_only_itself(tmp_path, runner):
    cluster = fleet(tmp_path, max_fail_percentage=30)
    runner.outcome["a1"] = "failed"  # 1 of 7 hosts: 14% overall, 50% inside rack-ra
    stages = [STAGE, Stage("nvidia", str(SMOKE), "")]
    summary = provision_run(cluster, plan_options(stages), home=tmp_path / "state")
    base = summary["stages"][0]
    ra = next(s for s in base["shards"] if s["name"] == "rack-ra")
    assert ra["stopped_by_failure_threshold"] is True
    assert base["hosts"]["a2"]["status"] == "aborted"
    assert base["hosts"]["b2"]["status"] == "ok" and base["shards_not_started"] == []
    assert summary["stopped"] is None
    # later stages go on without the stopped shard's hosts
    assert set(summary["stages"][1]["hosts"]) == {"ctl", "b1", "b2", "c1", "c2"}
    assert summary["failed_hosts"] == ["a1"] and summary["exit_code"] == 1


def test_overall_threshold_leaves_remaining_shards_unstarted(tmp_path, runner):
    cluster = fleet(tmp_path, max_fail_percentage=10)
    runner.outcome["a1"] = "unreachable"
    options = plan_options([STAGE], max_parallel_shards=1)
    summary = provision_run(cluster, options, home=tmp_path / "state")
    stage = summary["stages"][0]
    assert stage["shards_not_started"] == ["rack-rb", "rack-rc"]
    assert [s["status"] for s in stage["shards"]] == [
        "successful",
        "failed",
        "not_started",
        "not_started",
    ]
    assert stage["hosts"]["c2"]["status"] == "not_run"
    assert summary["stopped"]["shards_not_started"] == ["rack-rb", "rack-rc"]
    assert "max_fail_percentage 10%" in summary["stopped"]["reason"]
    assert len(runner.started) == 2
    assert summary["unreachable_hosts"] == ["a1"]


def test_a_failed_controller_shard_starts_no_compute_shard(tmp_path, runner):
    cluster = fleet(tmp_path, max_fail_percentage=50)
    runner.outcome["ctl"] = "failed"
    summary = provision_run(cluster, plan_options([STAGE]), home=tmp_path / "state")
    assert len(runner.started) == 1
    assert "controllers' shard failed" in summary["stopped"]["reason"]
    assert summary["stages"][0]["shards_not_started"] == ["rack-ra", "rack-rb", "rack-rc"]


def test_retry_failed_runs_only_the_failed_hosts_shards(tmp_path, runner):
    cluster = fleet(tmp_path, max_fail_percentage=50)
    state = tmp_path / "state"
    runner.outcome.update(a2="failed", c1="unreachable")
    first = provision_run(cluster, plan_options([STAGE]), home=state)
    assert sorted(first["failed_hosts"] + first["unreachable_hosts"]) == ["a2", "c1"]
    runner.outcome.clear()
    runner.started.clear()
    options = plan_options([STAGE], retry_failed=True)
    retry = provision_run(cluster, options, home=state)
    assert retry["targets"] == ["a2", "c1"]
    assert sorted(limit_hosts(k)[0] for k in runner.started) == ["a2", "c1"]
    assert [s["name"] for s in retry["stages"][0]["shards"]] == ["rack-ra", "rack-rc"]
    assert retry["exit_code"] == 0


def test_new_nodes_refresh_the_rest_and_run_everything_on_the_new(tmp_path, runner):
    state = tmp_path / "state"
    old = local_cluster(tmp_path / "inv", ["a1", "a2"], racks=RACKS, controller="ctl")
    provision_run(old, plan_options([STAGE]), home=state)
    grown = local_cluster(tmp_path / "inv", ["a1", "a2", "b1", "b2"], racks=RACKS, controller="ctl")
    assert records.provisioned_hosts(grown.inventory_dir, state) == {"ctl", "a1", "a2"}
    runner.started.clear()

    options = plan_options([STAGE], new_nodes=True)
    summary = provision_run(grown, options, home=state)
    assert summary["new_nodes"] == {
        "new": ["b1", "b2"],
        "existing": ["ctl", "a1", "a2"],
        "refreshed": ["ctl", "a1", "a2"],
    }
    assert [e["name"] for e in summary["stages"]] == ["refresh", "base"]
    refresh = [k for k in runner.started if k["playbook"] == str(REFRESH.path())]
    assert sorted(h for k in refresh for h in limit_hosts(k)) == ["a1", "a2", "ctl"]
    base = [k for k in runner.started if k["playbook"] == str(SMOKE)]
    assert [limit_hosts(k) for k in base] == [["b1", "b2"]]
    # Nothing new: nothing runs.
    runner.started.clear()
    again = provision_run(grown, options, home=state)
    assert again["stages"] == [] and runner.started == [] and again["exit_code"] == 0


# --- events and progress -----------------------------------------------------------------------


def test_capped_log_keeps_failures_and_counts_what_it_drops():
    stream = StringIO()
    log = CappedLog(stream, cap_bytes=300)
    recorder = EventRecorder("base", log=log, shard="rack-ra")
    for i in range(20):
        recorder(ev("runner_on_ok", i, host=f"n{i}", task="T"))
    recorder(ev("runner_on_failed", 99, host="n7", task="T", res={"msg": "boom"}))
    totals = log.close()
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert totals["dropped"] > 0 and totals["bytes"] <= 300 + 200
    assert lines[-2]["event"] == "runner_on_failed" and lines[-2]["shard"] == "rack-ra"
    assert lines[-1] == {"event": "kiln_log_capped", "dropped": totals["dropped"], "cap": 300}


def test_progress_of_the_shards_is_folded_into_one_stage_line():
    seen: list[tuple] = []
    aggregate = ProgressAggregator(
        "base", 2, lambda s: seen.append((dict(s.counts), s.shards_running, s.shards_done))
    )
    aggregate.shard_started("a")
    aggregate.shard_started("b")
    one = StageProgress("base", counts={"ok": 2, "changed": 1, "failed": 0, "unreachable": 0})
    two = StageProgress("base", counts={"ok": 1, "changed": 0, "failed": 1, "unreachable": 1})
    aggregate.callback("a")(one)
    aggregate.callback("b")(two)
    aggregate.shard_finished("a")
    assert seen[-1] == ({"ok": 3, "changed": 1, "failed": 1, "unreachable": 1}, 2, 0)
    assert (aggregate.progress_now.shards_running, aggregate.progress_now.shards_done) == (1, 1)


def test_folded_progress_follows_recorders_that_update_their_state_in_place():
    """Each recorder reports its own StageProgress again and again (moving a host from ok to
    failed, say); the stage line moves by each report's change, over many shards."""
    seen: list[dict] = []
    aggregate = ProgressAggregator("base", 40, lambda s: seen.append(dict(s.counts)))
    recorders = [
        EventRecorder("base", progress=aggregate.callback(f"p{i}"), shard=f"p{i}")
        for i in range(40)
    ]
    for i, recorder in enumerate(recorders):
        recorder(ev("playbook_on_play_start", 1))
        recorder(ev("runner_on_ok", 2, host=f"h{i}a", task="T"))
        recorder(ev("runner_on_ok", 3, host=f"h{i}b", task="T", res={"changed": True}))
    for recorder in recorders[:5]:  # a host that was ok fails on a later task
        recorder(ev("runner_on_failed", 4, host=recorder.shard.replace("p", "h") + "a", task="U"))
    assert seen[-1] == {"ok": 35, "changed": 40, "failed": 5, "unreachable": 0}
    folded: dict[str, int] = {}
    for recorder in recorders:
        for key, value in recorder.progress_now.counts.items():
            folded[key] = folded.get(key, 0) + value
    assert aggregate.progress_now.counts == folded
    assert aggregate.progress_now.batch == 1 and aggregate.progress_now.last_status == "failed"


# --- worker controllers ------------------------------------------------------------------------


def test_worker_ssh_command_uses_the_inventorys_ssh_settings():
    node = SimpleNamespace(
        name="w1",
        address="10.0.0.9",
        hostvars={
            "ansible_host": "10.0.0.9",
            "ansible_user": "root",
            "ansible_port": 2222,
            "ansible_ssh_private_key_file": "/keys/id",
            "ansible_ssh_common_args": "-o UserKnownHostsFile=/keys/known_hosts",
        },
    )
    argv = workers.worker_command(node, "/opt/kiln/bin/ansible-runner", "/tmp/kiln-worker/x")
    remote = shlex.split(argv[-1])
    assert argv[:-1] == [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=30",
        "-o",
        "ServerAliveInterval=10",
        "-o",
        "ServerAliveCountMax=3",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "UserKnownHostsFile=/keys/known_hosts",
        "-i",
        "/keys/id",
        "-p",
        "2222",
        "-l",
        "root",
        "10.0.0.9",
        "--",
    ]
    # the venv's own Python runs the lease (worker_side's source), then the runner under it
    assert remote[:2] == ["/opt/kiln/bin/python3", "-c"] and "def run(lease" in remote[2]
    assert remote[3:] == [
        "run", "60.0", "/tmp/kiln-worker/x", "--",
        "/opt/kiln/bin/ansible-runner", "worker", "--private-data-dir", "/tmp/kiln-worker/x",
        "--delete",
    ]  # fmt: skip
    stop = shlex.split(workers.stop_command(node, "ansible-runner", "/tmp/kiln-worker/x")[-1])
    assert stop[:2] == ["python3", "-c"] and stop[3:] == ["stop", "/tmp/kiln-worker/x"]
    assert workers.remote_dir("r1", "base", "rack-a") == "/tmp/kiln-worker/r1-base-rack-a"


def test_streamed_kwargs_name_paths_as_the_worker_sees_them(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    (files / "slurm.conf").write_text("x\n")
    inventory = tmp_path / "shards" / "hosts.json"
    inventory.parent.mkdir()
    inventory.write_text("{}")
    limit = tmp_path / "limit"
    limit.write_text("n1\n")
    pdd = tmp_path / "base" / "rack-a"
    pdd.mkdir(parents=True)
    request = engine.PlaybookRequest(
        playbook=SMOKE,
        inventory=inventory,
        private_data_dir=pdd,
        ident="r1",
        fact_cache=tmp_path / "fc",
        limit=f"@{limit}",
        extravars={"slurm_common_rendered_dir": str(files), "kiln_batch_size": "2"},
    )
    kwargs = stream.streamed_kwargs(request, "/w/x")
    assert kwargs["playbook"] == str(pdd / "project" / "smoke.yml")
    assert (pdd / "project" / "smoke.yml").is_file()
    assert kwargs["inventory"] == str(pdd / "inventory" / "hosts.json")
    assert kwargs["limit"] == "@/w/x/kiln_ship/limit"
    assert kwargs["extravars"] == {
        "slurm_common_rendered_dir": "/w/x/kiln_ship/slurm_common_rendered_dir",
        "kiln_batch_size": "2",
    }
    assert (pdd / "kiln_ship" / "slurm_common_rendered_dir" / "slurm.conf").is_file()
    assert kwargs["envvars"]["ANSIBLE_CONFIG"] == "/w/x/ansible.cfg"
    # the worker's ansible-runner keeps its own stdout callback; kiln's batched workers run
    # there over Ansible's linear strategy, the plugin sent beside the playbook
    assert not set(engine.LOCAL_ONLY) - {"ANSIBLE_STRATEGY"} & set(kwargs["envvars"])
    assert kwargs["envvars"]["ANSIBLE_STRATEGY"] == "kiln_linear"
    assert (pdd / "project" / "strategy_plugins" / "kiln_linear.py").is_file()
    assert kwargs["settings"]["fact_cache"] == "/w/x/fact_cache"
    assert "event_handler" not in kwargs


@pytest.mark.local
def test_a_real_local_worker_streams_events_home(tmp_path):
    """transmit -> `ansible-runner worker` (a local process standing in for ssh) -> process."""
    cluster = local_cluster(tmp_path / "inv", ["n1", "n2"], fail=("n2",), controller="ctl")
    out = tmp_path / "export"
    from kiln.inventory.export import export_inventory

    inventory = export_inventory(cluster, out)
    limit = tmp_path / "limit"
    limit.write_text("n1\nn2\n")
    request = engine.PlaybookRequest(
        playbook=SMOKE,
        inventory=inventory,
        private_data_dir=tmp_path / "pdd",
        ident="r1",
        fact_cache=tmp_path / "fc",
        limit=f"@{limit}",
        extravars={"kiln_max_fail_percentage": 100},
        envvars={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},  # as provision sets it
    )
    remote = tmp_path / "worker-side"
    runner = str(Path(sys.executable).parent / "ansible-runner")
    log = StringIO()
    recorder = EventRecorder("base", log=log)
    result = stream.run_playbook_streamed(
        request, recorder, ["n1", "n2"], workers.worker_argv(runner, str(remote)), str(remote)
    )
    assert result.status == "failed" and result.rc == 2
    assert result.hosts["n1"].status == "changed"
    assert result.hosts["n2"].status == "failed"
    assert result.hosts["n2"].message == "n2 was asked to fail"
    assert (tmp_path / "markers" / "n1").is_file()
    assert (result.artifact_dir / "rc").read_text().strip() == "2"
    assert not list(result.artifact_dir.glob("job_events/*.json"))
    assert not remote.exists()  # --delete


# --- a real run: two shards in parallel over the local connection -------------------------------


@pytest.mark.local
def test_two_shards_run_in_parallel_for_real(tmp_path):
    cluster = local_cluster(
        tmp_path / "inv",
        ["n1", "n2", "n3", "n4"],
        controller="ctl",
        rollout={"shard_by": "count", "shard_size": 2, "max_parallel_shards": 2},
    )
    summary = provision_run(cluster, plan_options([STAGE]), home=tmp_path / "state")
    assert summary["exit_code"] == 0, summary["stopped"]
    stage = summary["stages"][0]
    assert [(s["name"], s["hosts"]) for s in stage["shards"]] == [
        ("controllers", ["ctl"]),
        ("part-001", ["n1", "n2"]),
        ("part-002", ["n3", "n4"]),
    ]
    assert {h: r["status"] for h, r in stage["hosts"].items()} == dict.fromkeys(
        ["ctl", "n1", "n2", "n3", "n4"], "changed"
    )
    one, two = stage["shards"][1:]
    assert one["started"] <= two["finished"] and two["started"] <= one["finished"]  # overlap
    assert all((tmp_path / "markers" / n).is_file() for n in ("n1", "n2", "n3", "n4"))


def test_provision_runs_as_many_shards_as_the_memory_budget_allows(tmp_path, runner, monkeypatch):
    limits: list[int] = []
    real = shards.parallel_limit

    def spy(*args, **kwargs):
        limits.append(real(*args, cpu_count=64, **kwargs))
        return limits[-1]

    monkeypatch.setattr(plan_build, "parallel_limit", spy)
    pools: list[int] = []
    pool = runner_execute.ThreadPoolExecutor

    def sized(max_workers, **kwargs):
        pools.append(max_workers)
        return pool(max_workers=max_workers, **kwargs)

    monkeypatch.setattr(runner_execute, "ThreadPoolExecutor", sized)
    cluster = fleet(tmp_path, shard_by="count", shard_size=1, controller_memory_gib=0.9, forks=20)
    plan = make_plan(cluster, plan_options([STAGE]), tmp_path / "state")
    # (922 - 128 MiB) / (90 + 20 x 15 MiB) per shard, though 64 cores and 6 shards
    assert limits == [2] and plan.stages[0].parallel == 2  # sized when the plan is made
    summary = provision_run(cluster, plan_options([STAGE]), home=tmp_path / "state")
    assert summary["exit_code"] == 0
    assert pools == [2]  # the runner runs what the plan sized
