"""Never silent for more than 15 s (issue 20): the stage display's heartbeat, the sandbox's
plain progress, the image build's streamed output and the burn-in job poll, each driven by a
fake clock. The node image carries the burn-in runtime the role pins."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from kiln.burnin.jobs import JobSpec
from kiln.burnin.submit import JobQueue
from kiln.commands._progress import StageDisplay
from kiln.commands.sandbox import plain_progress
from kiln.plan.stages import Stage
from kiln.runner.events import StageProgress
from kiln.runner.outcome import StageOutcome
from kiln.sandbox import image, releases

REPO = Path(__file__).resolve().parents[2]
STAMP = re.compile(r"^\d\d:\d\d:\d\d ")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def lines(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_a_silent_task_gets_a_timestamped_heartbeat_naming_it_and_its_hosts(capsys):
    clock = Clock()
    display = StageDisplay(rich=False, clock=clock, thread=False)
    with display:
        display.stage_started(Stage("burnin", "x.yml", ""), ["kiln-node01", "kiln-node02"], 1)
        state = StageProgress("burnin", task="Install the distribution's torch (CPU, gloo)")
        display.progress(state)
        clock.now += 9
        display.tick()  # 9 s: nothing yet
        state.last_host, state.last_status = "kiln-node01", "ok"
        state.counts["ok"] = 1
        display.progress(state)  # node01 answered; no line off a terminal, so the clock runs on
        clock.now += 2
        display.tick()  # 11 s since the last line
        clock.now += 5
        display.tick()  # 5 s since the heartbeat: quiet
        clock.now += 6
        display.tick()  # 11 s since the heartbeat
    shown = lines(capsys)
    assert all(STAMP.match(line) for line in shown), shown
    shown = [STAMP.sub("", line) for line in shown]
    assert shown == [
        "burnin: 2 host(s) in 1 batch(es)",
        "burnin: task Install the distribution's torch (CPU, gloo)",
        "burnin: still running 'Install the distribution's torch (CPU, gloo)' on 1 host(s): "
        "kiln-node02 (11s in the task, 11s in the stage)",
        "burnin: still running 'Install the distribution's torch (CPU, gloo)' on 1 host(s): "
        "kiln-node02 (22s in the task, 22s in the stage)",
    ]


def test_no_heartbeat_between_stages_and_many_hosts_are_counted(capsys):
    clock = Clock()
    display = StageDisplay(rich=False, clock=clock, thread=False)
    clock.now += 60
    display.tick()  # no stage running: nothing to say
    hosts = [f"kiln-node{i:02d}" for i in range(1, 8)]
    display.stage_started(Stage("base", "x.yml", ""), hosts, 1)
    clock.now += 10
    display.tick()
    display.stage_finished(Stage("base", "x.yml", ""), StageOutcome("base", "x.yml", "ok"))
    clock.now += 60
    display.tick()
    shown = [STAMP.sub("", line) for line in lines(capsys)]
    assert shown[1] == (
        "base: still running 'starting' on 7 host(s): kiln-node01, kiln-node02, kiln-node03, "
        "kiln-node04 +3 (10s in the task, 10s in the stage)"
    )
    assert shown[2:] == ["base: ok (no host)"]


def test_on_a_terminal_the_heartbeat_updates_the_live_line(monkeypatch):
    clock = Clock()
    display = StageDisplay(rich=True, clock=clock, thread=False)
    updates: list[str] = []
    monkeypatch.setattr(display.bar, "add_task", lambda *a, **k: 0)
    monkeypatch.setattr(display.bar, "update", lambda _id, **k: updates.append(k["description"]))
    display.stage_started(Stage("slurm", "x.yml", ""), ["kiln-ctl"], 1)
    display.progress(StageProgress("slurm", task="Wait for slurmctld"))
    clock.now += 10
    display.tick()
    assert "still running 'Wait for slurmctld' on 1 host(s): kiln-ctl (10s" in updates[-1]


def test_the_heartbeat_thread_ticks_while_the_display_is_open(capsys):
    with StageDisplay(rich=False, every=0.0) as display:
        display.stage_started(Stage("base", "x.yml", ""), ["kiln-node01"], 1)
        time.sleep(1.3)  # the thread ticks once a second
    assert any("base: still running 'starting'" in line for line in lines(capsys))


def test_sandbox_plain_progress_is_timestamped_and_throttles_detail_lines(capsys):
    clock = Clock()
    say = plain_progress(clock=clock, every=10)
    say("building the node image")
    for second in range(25):  # apt prints a line a second
        say(f"node image: Unpacking package{second}", detail=True)
        clock.now += 1
    say("starting kiln-ctl")
    shown = [STAMP.sub("", line) for line in lines(capsys)]
    assert shown == [
        "building the node image",  # a line: the next 10 s of detail stay quiet
        "  node image: Unpacking package10",
        "  node image: Unpacking package20",
        "starting kiln-ctl",
    ]


def test_a_silent_build_command_reports_that_it_is_still_running(monkeypatch):
    monkeypatch.setattr(image, "HEARTBEAT_S", 0.2)
    said: list[str] = []
    script = "print('Get:1 python3-torch', flush=True); import time; time.sleep(1.5); print('done')"
    rc, tail = image.stream(
        [sys.executable, "-c", script],
        "node image",
        lambda message, detail=False: said.append(message),
        timeout=30,
    )
    assert rc == 0 and tail == ["Get:1 python3-torch", "done"]
    assert said[0] == "node image: Get:1 python3-torch"
    assert any(line.startswith("node image: still running (") for line in said), said


def test_the_burnin_job_poll_says_something_every_ten_seconds_while_jobs_run():
    clock = Clock()
    said: list[str] = []
    polls = iter(["1|RUNNING|None\n"] * 5 + [""])
    ctl = SimpleNamespace(
        submit_many=lambda scripts, name: (["1"], ""),
        run=lambda argvs, check=False: [SimpleNamespace(stdout=next(polls))],
    )
    queue = JobQueue(ctl, said.append, poll_seconds=5, clock=clock)
    queue.run([JobSpec("gemm-kiln-node01", "#!/bin/sh", ("kiln-node01",))], "node GEMM",
              limit_minutes=10)  # fmt: skip
    assert said == [
        "node GEMM: 1 Slurm job(s) 1",
        "node GEMM: 1 running (0s)",
        "node GEMM: 1 running (10s)",
        "node GEMM: 1 running (20s)",
    ]


@pytest.mark.parametrize("release", list(releases.RELEASES.values()), ids=lambda r: r.os)
def test_the_node_image_installs_the_burnin_runtime_the_role_pins(release):
    major = release.os.split("-")[1]
    vars_file = REPO / f"playbooks/roles/burnin/vars/Debian-{major}.yml"
    role = yaml.safe_load(vars_file.read_text())
    pinned = {spec.split("=")[0]: spec for spec in role["__burnin_system_packages"]}
    assert set(pinned) == set(image.RUNTIME_PACKAGES)
    assert all("=" in spec for spec in pinned.values()), "the role checks the version"
    assert "prometheus-node-exporter" in image.PREFETCH_PACKAGES  # the monitoring stage's
    for package in image.RUNTIME_PACKAGES:
        assert f"--no-install-recommends {package}" in image.customize_script(release)


def test_a_slow_sandbox_boot_says_how_it_goes_every_10_s(monkeypatch):
    from kiln.sandbox import cluster
    from kiln.sandbox.config import Node

    clock = [0.0]
    monkeypatch.setattr(cluster.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(cluster.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(
        cluster, "systemd_state", lambda name: "starting" if clock[0] < 25 else "running"
    )
    monkeypatch.setattr(cluster, "_port_open", lambda address: True)
    said: list[str] = []
    node = Node("kiln-node01", "172.31.250.11", "compute")
    assert cluster.wait_ready(node, progress=said.append) == "running"
    assert said == [
        "kiln-node01: still booting after 10s (systemd: starting)",
        "kiln-node01: still booting after 20s (systemd: starting)",
    ]


def test_a_build_that_prints_then_goes_quiet_leaves_no_long_gap_in_a_log(monkeypatch):
    """Seen in `make demo`'s log: apt printed for 9 s after a shown line (all dropped by the
    log's throttle), then `docker commit` printed nothing: 19 s without a line. The build's
    beat and the log's throttle now share a period of HEARTBEAT_S / 2."""
    import inspect

    assert inspect.signature(plain_progress).parameters["every"].default <= 10.0 / 2
    beat = 0.4  # image.HEARTBEAT_S scaled down from 10 s
    monkeypatch.setattr(image, "HEARTBEAT_S", beat)
    say = plain_progress(every=beat / 2)
    printed: list[float] = []
    monkeypatch.setattr(
        "kiln.commands.sandbox.err.print", lambda *a, **k: printed.append(time.monotonic())
    )
    script = (
        "import time\n"
        "for i in range(14): print('Unpacking', i, flush=True); time.sleep(0.05)\n"
        "time.sleep(1.2)\n"
    )
    start = time.monotonic()
    rc, _ = image.stream([sys.executable, "-c", script], "node image", say, timeout=30)
    end = time.monotonic()
    assert rc == 0 and printed
    marks = [start, *printed, end]
    worst = max(b - a for a, b in zip(marks, marks[1:], strict=False))
    assert worst <= beat + 0.25, (worst, [round(t - start, 2) for t in marks])
