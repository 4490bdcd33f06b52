"""Worker controllers through a Receptor mesh: the kiln side's choices and the worker side's lease.

The mesh itself (Receptor on the sandbox's containers, mutual TLS, a worker killed mid-shard)
runs in tests/integration/test_shards.py. Here: which transport kiln_rollout asks for, the
commands kiln starts, how a finished unit's status becomes an exit code, and worker_side's
`receptor-run` for real on this machine: the job from the whole of stdin, its stream on
stdout, the lease kept by `beat` (the file beside the job's directory) and a job that hears
none killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from kiln.inventory.schema import RolloutSpec
from kiln.plan.model import Rollout
from kiln.runner import receptor, worker_side, workers

SOCKET = "tls://10.0.0.2:27199"
RUNNER_PATH = "/opt/kiln-worker/bin/ansible-runner"
CREDENTIALS = {"ca": "/etc/kiln/ca.crt", "cert": "/etc/kiln/kiln.crt", "key": "/etc/kiln/kiln.key"}


def rollout(**changes) -> Rollout:
    base = {"batch_size": "100%", "max_fail_percentage": 0, "forks": 25, "max_parallel_shards": 0,
            "controller_memory_gib": 2.0, "worker_runner": RUNNER_PATH}  # fmt: skip
    return Rollout(**(base | changes))


def test_ssh_stays_the_default_and_receptor_is_chosen_by_kiln_rollout():
    assert isinstance(workers.transport(rollout()), workers.SshTransport)
    spec = RolloutSpec(worker_transport="receptor", receptor={"socket": SOCKET, **CREDENTIALS})
    chosen = workers.transport(rollout(worker_transport="receptor", receptor=spec.receptor))
    assert isinstance(chosen, workers.ReceptorTransport)
    assert chosen.mesh == receptor.Mesh(SOCKET, **CREDENTIALS)


def test_the_inventory_must_say_where_the_mesh_is_and_with_what_credentials():
    with pytest.raises(ValidationError, match="needs kiln_rollout.receptor"):
        RolloutSpec(worker_transport="receptor")
    with pytest.raises(ValidationError, match="needs ca, cert and key"):
        RolloutSpec(worker_transport="receptor", receptor={"socket": SOCKET})
    with pytest.raises(ValidationError, match="Unix socket path or tls://HOST:PORT"):
        RolloutSpec(receptor={"socket": "tcp://10.0.0.2:27199"})
    local = RolloutSpec(worker_transport="receptor", receptor={"socket": "/run/receptor.sock"})
    assert local.receptor.ca is None  # a Receptor node on this machine: its Unix socket


def test_a_shard_runs_as_a_unit_on_the_workers_node_id_under_the_same_lease():
    mesh = receptor.Mesh(SOCKET, **CREDENTIALS)
    chosen = workers.ReceptorTransport(RUNNER_PATH, mesh)
    node = SimpleNamespace(name="gpu001", hostvars={})
    argv = chosen.worker_command(node, "/tmp/kiln-worker/r1-base-part-001")
    assert argv[:4] == [sys.executable, "-m", "kiln.runner.receptor", "run"]
    assert argv[argv.index("--node") + 1] == "gpu001"
    assert argv[argv.index("--lease") + 1] == f"{workers.LEASE_S:g}"
    assert argv[argv.index("--") + 1 :] == [
        RUNNER_PATH, "worker",
        "--private-data-dir", "/tmp/kiln-worker/r1-base-part-001", "--delete",
    ]  # fmt: skip
    args, job = receptor.parse(argv[3:])  # what the command itself reads back
    assert (args.action, args.node, args.lease, args.socket) == ("run", "gpu001", 60.0, SOCKET)
    assert job == argv[argv.index("--") + 1 :]
    renamed = SimpleNamespace(name="gpu001", hostvars={"kiln_receptor_node": "gpu001.mesh"})
    stop = chosen.stop_command(renamed, "/tmp/kiln-worker/r1-base-part-001")
    assert stop[3] == "stop" and stop[stop.index("--node") + 1] == "gpu001.mesh"
    args, job = receptor.parse(stop[3:])
    assert (args.action, args.dir, job) == ("stop", "/tmp/kiln-worker/r1-base-part-001", [])


@pytest.mark.parametrize(
    ("status", "code"),
    [
        ({"StateName": "Succeeded", "Detail": "exit status 0"}, 0),
        ({"StateName": "Failed", "Detail": "exit status 2"}, 2),
        ({"StateName": "Failed", "Detail": "signal: killed"}, 1),
        ({"StateName": "Canceled", "Detail": "Canceled"}, 1),
        ({}, 1),  # no status could be read: never a success
    ],
)
def test_a_finished_units_status_becomes_its_exit_code(status, code):
    assert receptor.exit_code(status) == code


# A stand-in for the worker's ansible-runner: `worker --private-data-dir DIR ...`, the job from
# stdin echoed back (the stream), then it works for SECONDS.
RUNNER = """#!/bin/sh
[ "$1" = worker ] || exit 9
cat
sleep "$KILN_TEST_SECONDS"
echo finished
"""


def receptor_run(tmp_path: Path, lease: float, seconds: float) -> tuple[subprocess.Popen, str]:
    runner = tmp_path / "bin" / "ansible-runner"
    runner.parent.mkdir()
    runner.write_text(RUNNER)
    runner.chmod(0o755)
    directory = str(tmp_path / "kiln-worker" / "r1-base-part-001")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kiln.runner.worker_side", "receptor-run", str(lease), directory,
         "--", str(runner), "worker", "--private-data-dir", directory, "--delete"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env={"KILN_TEST_SECONDS": str(seconds), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    proc.stdin.write(b"the job\n")
    proc.stdin.close()
    return proc, directory


def beat(directory: str) -> None:
    subprocess.run([sys.executable, "-m", "kiln.runner.worker_side", "beat", directory], check=True)


def wait_for_lease(directory: str) -> None:
    """Until receptor-run holds the job's lease (it writes the file once it has read the job)."""
    deadline = time.monotonic() + 10
    while not Path(directory + ".beat").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def test_a_job_kept_alive_by_beats_runs_to_its_end(tmp_path):
    proc, directory = receptor_run(tmp_path, lease=1.5, seconds=3)
    wait_for_lease(directory)
    deadline = time.monotonic() + 20
    while proc.poll() is None and time.monotonic() < deadline:
        renewed = subprocess.run(
            [sys.executable, "-m", "kiln.runner.worker_side", "beat", directory], check=False
        ).returncode
        # renewed while the job runs; GONE only once it has ended (and let go of its lease)
        assert renewed == 0 or proc.poll() is not None, renewed
        time.sleep(0.4)
    assert proc.wait(timeout=5) == 0
    assert proc.stdout.read() == b"the job\nfinished\n"  # the stream alone, nothing else
    assert not Path(directory + ".beat").exists()  # the lease goes with the job
    assert not Path(directory + ".stderr").exists()  # kept only when the job failed


def test_a_job_that_hears_no_beat_is_killed_when_its_lease_runs_out(tmp_path):
    started = time.monotonic()
    proc, directory = receptor_run(tmp_path, lease=1.5, seconds=30)
    code = proc.wait(timeout=20)
    assert code != 0 and time.monotonic() - started < 10
    assert b"finished" not in proc.stdout.read()
    assert "no heartbeat for 1s, job killed" in Path(directory + ".stderr").read_text()
    found = subprocess.run(["pgrep", "-f", directory], capture_output=True, check=False)
    assert found.returncode == 1, found.stdout  # nothing of the job is left


def test_only_ansible_runner_worker_runs_through_a_unit(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kiln.runner.worker_side", "receptor-run", "60",
         str(tmp_path / "d"), "--", "sh", "-c", "echo ran"],
        input=b"", capture_output=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and b"ran" not in proc.stdout
    assert b"only `ansible-runner worker` runs here" in proc.stderr


class _Mesh:
    """The mesh as `run` sees it: a results stream kiln's test controls (a pipe), calls that
    reach the worker or not, and the units' status."""

    def __init__(self, results: int, beat: int | None, state: str = "Succeeded") -> None:
        self.results, self.beat, self.state = results, beat, state
        self.calls: list[list[str]] = []
        self.released: list[str] = []

    def control(self):
        return SimpleNamespace(get_work_results=lambda unit: os.fdopen(self.results, "rb"))


def _run(monkeypatch, mesh: _Mesh, *stdin: bytes) -> int:
    """`run` with these writes to its stdin, 0.2 s apart (kiln's heartbeats come apart)."""
    read, write = os.pipe()

    def feed() -> None:
        for chunk in stdin:
            os.write(write, chunk)
            time.sleep(0.2)

    threading.Thread(target=feed, daemon=True).start()
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(fileno=lambda: read))
    monkeypatch.setattr(receptor, "submit", lambda m, node, args, payload=b"": "unit1")
    monkeypatch.setattr(receptor, "status", lambda m, unit: {"StateName": mesh.state})
    monkeypatch.setattr(receptor, "release", lambda m, unit: mesh.released.append(unit))

    def call(m, node, args, timeout=receptor.CALL_TIMEOUT_S):
        mesh.calls.append(list(args))
        return mesh.beat

    monkeypatch.setattr(receptor, "call", call)
    try:
        return receptor.run(mesh, "gpu001", 60, "/tmp/kiln-worker/d", ["ansible-runner", "worker"])
    finally:
        os.close(write)


def test_a_worker_the_mesh_no_longer_reaches_is_given_up_after_three_missed_beats(monkeypatch):
    results, _held_open = os.pipe()  # the stream just stops, as when the worker's Receptor dies
    mesh = _Mesh(results, beat=None)  # no beat unit ends: the worker is not reached
    started = time.monotonic()
    assert _run(monkeypatch, mesh, b"3\njob", b"\n", b"\n", b"\n") == receptor.LOST
    assert mesh.calls == [["beat", "/tmp/kiln-worker/d"]] * receptor.MAX_MISSED
    assert time.monotonic() - started < 5


def test_a_unit_that_ends_gives_its_exit_status_and_is_released(monkeypatch):
    results, writer = os.pipe()
    os.write(writer, b"the stream")
    os.close(writer)
    mesh = _Mesh(results, beat=0, state="Succeeded")
    assert _run(monkeypatch, mesh, b"3\njob") == 0
    assert mesh.released == ["unit1"] and mesh.calls == []


def test_a_job_gone_while_its_unit_runs_on_ends_the_wait(monkeypatch):
    """Killed with Receptor's command runner, a job leaves its unit "Running" and its results
    open for ever: the beat finds no job holding the lease, and `run` stops waiting."""
    results, _held_open = os.pipe()
    mesh = _Mesh(results, beat=worker_side.GONE)
    monkeypatch.setattr(receptor, "GRACE_S", 0.5)
    assert _run(monkeypatch, mesh, b"3\njob", b"\n") == 1
    assert mesh.released == ["unit1"]


def test_a_beat_renews_a_running_jobs_lease_and_says_when_none_holds_it(tmp_path):
    proc, directory = receptor_run(tmp_path, lease=30, seconds=30)
    wait_for_lease(directory)
    beat(directory)  # check=True: renewed
    proc.kill()  # the job's holder killed, as with Receptor's command runner
    proc.wait()
    gone = subprocess.run(
        [sys.executable, "-m", "kiln.runner.worker_side", "beat", directory], check=False
    )
    assert gone.returncode == worker_side.GONE
    subprocess.run([sys.executable, "-m", "kiln.runner.worker_side", "stop", directory])


def test_a_mesh_that_is_not_there_loses_the_worker_in_one_line(monkeypatch, capsys):
    read, write = os.pipe()
    os.write(write, b"3\njob")
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(fileno=lambda: read))
    argv = receptor.run_argv(receptor.Mesh("/nonexistent/receptor.sock"), "gpu001", 60, "/d",
                             ["ansible-runner", "worker"])  # fmt: skip
    assert receptor.main(argv[3:]) == receptor.LOST
    err = capsys.readouterr().err
    assert err.startswith("kiln: Receptor at /nonexistent/receptor.sock: ") and err.count("\n") == 1
