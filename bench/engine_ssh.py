"""Benchmark: the engine over real SSH at 100 hosts, kiln's strategies beside stock Ansible.

Hosts: light sandbox hosts (kiln.sandbox.light: containers running only sshd, own host keys,
host key checking on), 100 by default, started by this script and removed at its end (--keep
leaves them). The play: TASKS no-change module tasks (stat, command, file, copy in turn) that run
a module on every host, after one warm-up run that makes the copies. Engines, with the
same inventory, playbook, forks (25), pipelining, ControlMaster/ControlPersist, host key checking
and interpreter; a fresh ControlPath directory per run, so every run opens its own connections:

  stock         ansible-playbook, Ansible's linear strategy (a fork per host-task), ssh connection
  kiln-linear   ansible-playbook, kiln_linear: batched workers over linear, ssh connection
  kiln-mitogen  ansible-playbook, kiln_mitogen_linear: batched workers over mitogen's linear
  kiln          kiln as shipped: kiln.runner.execute (ansible-runner, kiln's callback and the
                default strategy), in a process of its own

Controller CPU is the whole process tree's, read from a cgroup the engine's process starts in
(children stay in it, so ControlPersist masters that detach and mitogen's helpers are counted;
they are stopped at the end of each run). Node CPU is the light containers' own cgroups. Each
repeat runs every engine once, in an order rotated per repeat; printed: min and median of wall
time and of controller CPU per host-task, the median of the per-repeat ratios to stock, and a
check that every engine's per-host recap (ok, changed, failed, unreachable, skipped) equals
stock's. Needs root (a writable cgroup) and Docker.

    python bench/engine_ssh.py --hosts 100 --repeats 3

The play has 16 tasks unless --tasks says otherwise: half the length of kiln's average stage
(227 tasks in 7 stages on a GPU node, docs/scale.md). Each engine pays its SSH connections once
per host per play (mostly OpenSSH's key exchange); a shorter play weighs that more, a real stage
less, so the default stands for a short stage, not a trivial one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from remote_latency import write_play  # the same no-change play (bench/ is on sys.path)

from kiln.runner.engine import SSH_ARGS, STRATEGY_DIR, mitogen_strategy_dir
from kiln.sandbox import config, light
from kiln.sandbox.docker import docker

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
FORKS = 25
STRATEGIES = {
    "stock": "linear",
    "kiln-linear": "kiln_linear",
    "kiln-mitogen": "kiln_mitogen_linear",
}
ENGINES = (*STRATEGIES, "kiln")
RECAP = re.compile(
    r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)", re.M
)


class CpuGroup:
    """A cgroup for one engine's process tree: its CPU time and a way to stop what is left."""

    def __init__(self, name: str) -> None:
        v1 = Path("/sys/fs/cgroup/cpuacct")
        v2 = next(
            (p for p in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
             if (p / "cgroup.procs").exists() and (p / "cgroup.controllers").exists()),
            None,
        )  # fmt: skip
        if (v1 / "cpuacct.usage").exists():
            self.path, self.v2 = v1 / name, False
        elif v2 is not None:
            self.path, self.v2 = v2 / name, True
        else:
            raise SystemExit("no cgroup for CPU accounting (cgroup v1 cpuacct or cgroup v2)")
        try:
            self.path.mkdir(exist_ok=True)
        except OSError as error:
            raise SystemExit(f"cannot create {self.path} (run as root): {error}") from error

    def seconds(self) -> float:
        if self.v2:
            stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
            return int(stat["usage_usec"]) / 1e6
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def enter(self) -> None:
        """Called in the child between fork and exec: the engine starts inside the group."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def stop_leftovers(self) -> None:
        """SIGTERM then SIGKILL whatever the run left (ControlPersist masters, helpers)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and (self.path / "cgroup.procs").read_text().strip():
                time.sleep(0.05)

    def remove(self) -> None:
        self.stop_leftovers()
        self.path.rmdir()


def container_cpu(ids: list[str]) -> float:
    """CPU seconds the light containers have used (cgroup v1 under docker/, else v2)."""
    total = 0.0
    for cid in ids:
        v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
        if v1.exists():
            total += int(v1.read_text()) / 1e9
            continue
        v2 = Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat")
        if v2.exists():
            usec = dict(line.split() for line in v2.read_text().splitlines())["usage_usec"]
            total += int(usec) / 1e6
    return total


def ansible_env(strategy: str, control_dir: Path) -> dict[str, str]:
    """The same settings for every engine; only the strategy differs."""
    plugin_dirs = [str(STRATEGY_DIR)]
    mitogen = mitogen_strategy_dir()
    if mitogen is not None:
        plugin_dirs.append(str(mitogen))
    return {
        **os.environ,
        "ANSIBLE_FORKS": str(FORKS),
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_SSH_ARGS": SSH_ARGS,
        "ANSIBLE_CONTROL_PATH_DIR": str(control_dir),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_GATHERING": "explicit",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_STRATEGY_PLUGINS": os.pathsep.join(plugin_dirs),
        "ANSIBLE_STRATEGY": strategy,
        "PYTHONPATH": str(REPO / "cli"),
    }


def run_engine(engine: str, inventory: Path, play: Path, work: Path, group: CpuGroup):
    """(wall s, controller CPU s, per-host recap) of one run."""
    control_dir = Path(tempfile.mkdtemp(prefix="cp-", dir=work))
    if engine == "kiln":
        command = [sys.executable, __file__, "--kiln-run", str(inventory), str(play), str(work)]
        env = {**os.environ, "ANSIBLE_CONTROL_PATH_DIR": str(control_dir)}
    else:
        command = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(play)]
        env = ansible_env(STRATEGIES[engine], control_dir)
    cpu_before, start = group.seconds(), time.monotonic()
    proc = subprocess.run(
        command, env=env, capture_output=True, text=True, preexec_fn=group.enter, check=False
    )
    wall = time.monotonic() - start
    group.stop_leftovers()
    cpu = group.seconds() - cpu_before
    shutil.rmtree(control_dir, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"{engine} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-3000:]}")  # fmt: skip
    if engine == "kiln":
        recap = json.loads(proc.stdout)
    else:
        recap = {m[0]: [int(x) for x in m[1:]] for m in RECAP.findall(proc.stdout)}
    return wall, cpu, recap


def kiln_run(inventory: Path, play: Path, work: Path) -> int:
    """The `kiln` engine, in its own process: the play as a stage through kiln's engine; prints
    each host's recap counts as JSON."""
    from kiln.inventory import require_valid
    from kiln.plan import PlanOptions, make_plan
    from kiln.plan.stages import Stage
    from kiln.records.lock import InventoryLock
    from kiln.runner.execute import execute

    cluster = require_valid(inventory)
    options = PlanOptions(stages=(Stage("engine", str(play), ""),), forks=FORKS)
    plan = make_plan(cluster, options, work / "state")
    with InventoryLock(plan.inventory_dir, home=work / "state") as held:  # as a command does
        summary = execute(plan, lock=held, home=work / "state").to_dict()
    if summary["exit_code"] != 0:
        print(json.dumps(summary.get("stopped")), file=sys.stderr)
        return 1
    hosts = {}
    for stage in summary["stages"]:
        for name, r in stage["hosts"].items():
            hosts[name] = [r["ok"], r["changed"], r["unreachable"], r["failed"], r["skipped"]]
    print(json.dumps(hosts))
    return 0


def summarise(name: str, values: list[float]) -> str:
    return f"{name} min {min(values):.2f} median {statistics.median(values):.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=16, help="a multiple of 4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--keep", action="store_true", help="leave the light hosts running")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument("--kiln-run", nargs=3, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.kiln_run:
        return kiln_run(*args.kiln_run)
    if "stock" not in args.engines:
        args.engines.insert(0, "stock")

    paths = config.paths()
    print(f"starting {args.hosts} light hosts (sshd only) ...", file=sys.stderr)
    hosts = light.up(args.hosts, paths)
    print(f"  up in {hosts.seconds:.1f}s", file=sys.stderr)
    ids = docker(["ps", "-q", "--no-trunc", "--filter", f"label={light.LABEL}"]).stdout.split()
    group = CpuGroup("kiln-bench-engine")
    runs: dict[str, list[dict]] = {engine: [] for engine in args.engines}
    host_tasks = args.hosts * args.tasks
    try:
        with tempfile.TemporaryDirectory(prefix="kiln-engine-ssh-") as tmp:
            work = Path(tmp)
            play = write_play(work, args.tasks)
            # One warm-up run makes the copies, so every timed run changes nothing; the order
            # rotates per repeat, so no engine always runs first.
            run_engine(args.engines[0], hosts.inventory, play, work, group)
            for repeat in range(args.repeats):
                shift = repeat % len(args.engines)
                for engine in args.engines[shift:] + args.engines[:shift]:
                    node_before = container_cpu(ids)
                    wall, cpu, recap = run_engine(engine, hosts.inventory, play, work, group)
                    node = container_cpu(ids) - node_before
                    runs[engine].append(
                        {"repeat": repeat, "wall_s": wall, "cpu_s": cpu, "node_cpu_s": node,
                         "recap": recap}
                    )  # fmt: skip
                    print(
                        f"  repeat {repeat + 1} {engine:<13} wall {wall:6.1f} s  controller "
                        f"{cpu * 1e3 / host_tasks:6.2f} ms/host-task  nodes "
                        f"{node * 1e3 / host_tasks:6.2f} ms/host-task",
                        file=sys.stderr,
                    )
    finally:
        group.remove()
        if not args.keep:
            light.down()
    return report(runs, args, host_tasks)


def report(runs: dict[str, list[dict]], args, host_tasks: int) -> int:
    stock = runs["stock"]
    same = True
    print(
        f"\nengine over SSH: {args.hosts} light hosts x {args.tasks} no-change module tasks, "
        f"forks {FORKS}, {args.repeats} paired repeats (baseline: stock ansible-playbook)"
    )
    print(f"{'engine':<13} {'wall s (min/med)':>17} {'ctl ms/host-task (min/med)':>27} "
          f"{'node ms/ht':>10} {'ratio cpu':>9} {'ratio wall':>10} {'recaps':>7}")  # fmt: skip
    figures = {}
    for engine, measured in runs.items():
        cpu = [r["cpu_s"] * 1e3 / host_tasks for r in measured]
        wall = [r["wall_s"] for r in measured]
        node = [r["node_cpu_s"] * 1e3 / host_tasks for r in measured]
        ratio_cpu = statistics.median(
            r["cpu_s"] / s["cpu_s"] for r, s in zip(measured, stock, strict=True)
        )
        ratio_wall = statistics.median(
            r["wall_s"] / s["wall_s"] for r, s in zip(measured, stock, strict=True)
        )
        equal = all(r["recap"] == stock[0]["recap"] for r in measured)
        equal = equal and len(measured[0]["recap"]) == args.hosts
        same = same and equal
        figures[engine] = {"cpu_ms": statistics.median(cpu), "ratio_cpu": ratio_cpu,
                           "ratio_wall": ratio_wall, "wall_s": statistics.median(wall)}  # fmt: skip
        print(
            f"{engine:<13} {min(wall):8.1f}/{statistics.median(wall):<8.1f} "
            f"{min(cpu):13.2f}/{statistics.median(cpu):<13.2f} {statistics.median(node):10.2f} "
            f"{ratio_cpu:9.2f} {ratio_wall:10.2f} {'same' if equal else 'DIFFER':>7}"
        )
    kiln_strategies = [e for e in figures if e in ("kiln-linear", "kiln-mitogen")]
    if kiln_strategies:
        best = min(kiln_strategies, key=lambda e: figures[e]["cpu_ms"])
        print(f"lowest controller CPU of kiln's strategies: {best}")
    if "kiln" in figures:
        ratio = figures["kiln"]["ratio_cpu"]
        print(f"goal: kiln as shipped at most 0.35x stock's controller CPU per host-task: "
              f"{ratio:.2f}x, {'met' if ratio <= 0.35 else 'NOT met'}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"hosts": args.hosts, "tasks": args.tasks, "runs": runs,
                                         "figures": figures}, indent=1))  # fmt: skip
    if not same:
        print("the engines' recaps differ: the comparison is not valid", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
