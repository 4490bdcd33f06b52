"""A worker controller lost mid-shard: its job is gone before the shard runs on another worker.

worker_side's lease on its own (a job with no heartbeat killed, one with heartbeats and DONE
left to finish, `stop` sparing its caller), then real runs: `kiln provision` of a shard on
worker w1, which is lost while its hosts sleep in a task, and the shard finishes on w2. The
workers are local processes standing in for ssh (the same programs kiln runs over ssh): once
w1 dies (every process of its job killed; kiln's `stop` answers), once the network to it is
cut (a relay stops passing bytes but keeps the pipes open; kiln cannot reach it to stop the
job and waits out the lease). Each task writes which worker ran it on which host: no line of
w1 may follow a line of w2, and every host ends its play once, on w2.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_runner import local_cluster, plan_options, provision_run

from kiln.plan.stages import Stage
from kiln.runner import worker_side, workers

PYTHON = sys.executable
RUNNER = str(Path(sys.executable).parent / "ansible-runner")

SLOW_PLAY = """\
- name: A play that takes a while on every host
  hosts: all
  gather_facts: false
  vars:
    log: "{{ smoke_dir }}/{{ inventory_hostname }}.log"
  tasks:
    - name: Say which worker started it
      ansible.builtin.shell: echo "start $KILN_TEST_WORKER" >> {{ log }}
      changed_when: true
    - name: Work
      ansible.builtin.command: sleep 4
      changed_when: false
    - name: Say which worker ended it
      ansible.builtin.shell: echo "end $KILN_TEST_WORKER" >> {{ log }}
      changed_when: true
"""

# A stand-in for the network between kiln and a worker: passes bytes both ways until TRIGGER
# exists, then cuts: kiln's end sees the stream end and exit 255 (as ssh does), while the
# worker's pipes stay open and silent (held by a process that sleeps), as across a cut link.
RELAY = """\
import os, subprocess, sys, threading, time
trigger, cmd = sys.argv[1], sys.argv[3:]
child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def pump(src, dst):
    while not os.path.exists(trigger):
        data = os.read(src, 65536)
        if not data or os.path.exists(trigger):
            return
        os.write(dst, data)
for src, dst in ((0, child.stdin.fileno()), (child.stdout.fileno(), 1)):
    threading.Thread(target=pump, args=(src, dst), daemon=True).start()
while not os.path.exists(trigger) and child.poll() is None:
    time.sleep(0.05)
if child.poll() is None and os.fork() == 0:
    os.setsid()
    os.close(0)
    os.close(1)
    time.sleep(60)
    os._exit(0)
os._exit(255)
"""


def _program(tmp_path: Path) -> Path:
    path = tmp_path / "worker_side.py"
    path.write_text(workers.WORKER_SIDE)
    return path


def _framed(job: bytes) -> bytes:
    return b"%d\n" % len(job) + job


def _leased(tmp_path: Path, lease: str, directory: str, script: str, **popen) -> subprocess.Popen:
    """worker_side running `sh -c script` under a lease of `lease` seconds, its stdin ours."""
    argv = [PYTHON, str(_program(tmp_path)), "run", lease, directory, "--", "sh", "-c", script]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, **popen)


# --- the lease on its own ----------------------------------------------------------------------


def test_a_job_that_hears_no_heartbeat_is_killed_when_its_lease_runs_out(tmp_path):
    directory = str(tmp_path / "job-a")
    proc = _leased(tmp_path, "1.5", directory, f"sleep 30 # {directory}", stderr=subprocess.PIPE)
    started = time.monotonic()
    proc.stdin.write(_framed(b"the job"))
    proc.stdin.flush()  # and then silence: stdin stays open, no heartbeat
    assert proc.wait(timeout=20) == 128 + signal.SIGKILL  # stdin still open: the lease did it
    stderr = proc.stderr.read()
    assert 1.5 <= time.monotonic() - started < 10
    assert b"no heartbeat for 2s, job killed" in stderr
    assert not worker_side.naming(directory)  # nothing of the job left


def test_a_job_with_heartbeats_then_done_ends_as_it_will(tmp_path):
    directory = str(tmp_path / "job-b")
    proc = _leased(tmp_path, "1", directory, f"sleep 3; exit 7 # {directory}")
    proc.stdin.write(_framed(b"job"))
    proc.stdin.flush()
    for _ in range(5):  # 2.5 s of heartbeats, past the 1 s lease
        time.sleep(0.5)
        proc.stdin.write(worker_side.HEARTBEAT)
        proc.stdin.flush()
    proc.stdin.write(worker_side.DONE)
    proc.stdin.close()
    assert proc.wait(timeout=20) == 7  # the job's own status: not killed


def test_stdin_closed_before_done_kills_the_job_at_once(tmp_path):
    directory = str(tmp_path / "job-c")
    proc = _leased(tmp_path, "60", directory, f"sleep 30 # {directory}")
    proc.stdin.write(_framed(b"job"))
    proc.stdin.close()  # kiln's end gone: nobody reads the stream
    assert proc.wait(timeout=10) == 128 + signal.SIGKILL


def test_stop_kills_the_jobs_processes_and_spares_its_caller(tmp_path):
    directory = str(tmp_path / "job-d")
    job = subprocess.Popen(["sh", "-c", f"sleep 30 # {directory}"])
    program = _program(tmp_path)
    # run from a shell whose own command line names the directory, as over ssh
    stop = subprocess.run(
        ["sh", "-c", f"{PYTHON} {program} stop {directory}; echo survived {directory}"],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    assert stop.returncode == 0 and "survived" in stop.stdout
    assert job.wait(timeout=10) == -signal.SIGKILL


# --- a real shard, its worker lost --------------------------------------------------------------


def _cluster(tmp_path: Path):
    rollout = {"shard_by": "count", "shard_size": 100, "worker_runner": RUNNER}
    cluster_dir = tmp_path / "inv"
    local_cluster(cluster_dir, ["n1", "n2"], controller="ctl", rollout=rollout)
    document = json.loads((cluster_dir / "hosts.yml").read_text())
    document["all"]["children"]["kiln_workers"] = {
        "hosts": {"w1": {"ansible_host": "127.0.0.50"}, "w2": {"ansible_host": "127.0.0.51"}}
    }
    (cluster_dir / "hosts.yml").write_text(json.dumps(document))
    from kiln.inventory import require_valid

    return require_valid(cluster_dir)


def _lines(markers: Path) -> dict[str, list[str]]:
    return {
        host: (markers / f"{host}.log").read_text().splitlines()
        for host in ("n1", "n2")
        if (markers / f"{host}.log").exists()
    }


@pytest.mark.local
@pytest.mark.parametrize("loss", ["dies", "cut off"])
def test_a_lost_workers_shard_finishes_on_another_and_never_twice_at_once(
    tmp_path, monkeypatch, loss
):
    monkeypatch.setattr(workers, "LEASE_S", 2.0)
    monkeypatch.setattr(workers, "HEARTBEAT_S", 0.5)
    markers = tmp_path / "markers"
    trigger = tmp_path / "cut"
    relay = tmp_path / "relay.py"
    relay.write_text(RELAY)
    jobs: dict[str, str] = {}

    def worker_command(node, runner, directory):
        jobs[node.name] = directory
        argv = ["env", f"KILN_TEST_WORKER={node.name}", *workers.worker_argv(runner, directory)]
        if node.name == "w1" and loss == "cut off":
            return [PYTHON, str(relay), str(trigger), "--", *argv]
        return argv

    def stop_command(node, runner, directory):
        if loss == "cut off":  # kiln cannot reach it: ssh's own exit for that
            return ["sh", "-c", "exit 255"]
        return workers.stop_argv(runner, directory)

    monkeypatch.setattr(workers, "worker_command", worker_command)
    monkeypatch.setattr(workers, "stop_command", stop_command)

    def lose_w1() -> None:  # once w1 has started its hosts' work
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any("start w1" in lines for lines in _lines(markers).values()):
                break
            time.sleep(0.1)
        if loss == "dies":
            worker_side.kill_job(jobs["w1"])  # every process of w1's job, as if it powered off
        else:
            trigger.touch()

    watcher = threading.Thread(target=lose_w1, daemon=True)
    watcher.start()
    play = tmp_path / "project" / "slow.yml"  # its directory is what a worker is sent
    play.parent.mkdir()
    play.write_text(SLOW_PLAY)
    summary = provision_run(
        _cluster(tmp_path), plan_options([Stage("base", str(play), "")]), home=tmp_path / "home"
    )
    watcher.join(timeout=5)
    assert summary["exit_code"] == 0, json.dumps(summary["stages"], indent=1)[-3000:]
    stage = summary["stages"][0]
    shard = next(s for s in stage["shards"] if s["name"] != "controllers")
    assert shard["worker"] == "w2" and shard["requeued_from"] == ["w1"]
    assert {h: stage["hosts"][h]["status"] for h in ("n1", "n2")} == dict.fromkeys(
        ("n1", "n2"), "changed"
    )
    events = [
        json.loads(line)
        for line in (tmp_path / "home").rglob("events.jsonl").__next__().read_text().splitlines()
    ]
    lost = [e for e in events if e.get("event") == "kiln_worker_lost"]
    assert [(e["worker"], e["job"]) for e in lost] == [
        ("w1", "stopped" if loss == "dies" else "lease expired")
    ]
    if loss == "cut off":
        assert lost[0]["waited_s"] > 0
    time.sleep(workers.LEASE_S + 1)  # anything of w1 still alive would write by now
    for host, lines in _lines(markers).items():
        first_w2 = lines.index("start w2")
        assert all(line.endswith("w2") for line in lines[first_w2:]), (host, lines)
        assert lines[first_w2:] == ["start w2", "end w2"], (host, lines)
        assert "end w1" not in lines, (host, lines)
    assert not worker_side.naming(jobs["w1"])


# --- the pool's choices, with the stream patched -------------------------------------------------


def test_with_every_worker_lost_the_shards_hosts_are_unreachable_saying_why(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from kiln.plan.shards import Shard
    from kiln.runner import pool, stream
    from kiln.runner.engine import PlaybookRequest, PlaybookResult
    from kiln.runner.events import EventRecorder

    ran_on: list[str] = []

    def streamed(request, recorder, targets, command, remote_dir, heartbeat_s):
        ran_on.append(command[0])
        return PlaybookResult(
            status="error", rc=None, stats=None, hosts={}, batches=0, no_hosts_remaining=False,
            artifact_data={}, artifact_dir=tmp_path, worker_rc=255, heartbeat_at=0.0,
        )  # fmt: skip

    monkeypatch.setattr(stream, "run_playbook_streamed", streamed)
    monkeypatch.setattr(workers, "worker_command", lambda node, runner, d: [node.name])
    monkeypatch.setattr(workers, "stop_command", lambda node, runner, d: ["true"])
    nodes = {name: SimpleNamespace(name=name) for name in ("w1", "w2", "w3")}
    workers_pool = pool.WorkerPool(nodes, workers.SshTransport("ansible-runner"), "r1")
    request = PlaybookRequest(
        playbook=tmp_path / "p.yml", inventory=tmp_path / "i", private_data_dir=tmp_path,
        ident="r1", fact_cache=tmp_path / "fc",
    )  # fmt: skip
    shard = Shard("part-002", ("n1", "n2"), worker="w2")
    ran = workers_pool.run(shard, "base", request, lambda: EventRecorder("base"))
    assert ran_on == ["w2", "w3", "w1"]  # its own first, then the next standing, in order
    assert ran.worker is None and ran.lost == ["w2", "w3", "w1"]
    assert {h: r.status for h, r in ran.result.hosts.items()} == dict.fromkeys(
        ("n1", "n2"), "unreachable"
    )
    assert ran.result.hosts["n1"].message.startswith("no worker left to run shard part-002")
    # and a later shard of this run is not sent to any of them
    assert workers_pool.standing("w1") is None
