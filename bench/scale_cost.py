"""Controller cost per host-task: kiln's sharded engine beside one stock ansible-playbook.

Engines, each over the same N hosts, one after the other at each N:

  stock        the baseline: ONE stock ansible-playbook process over all N hosts, Ansible's
               linear strategy and default callback, no ansible-runner
  kiln         kiln's sharded engine as shipped (kiln.runner.execute): shards of --shard-size
               hosts, --parallel at once, each an ansible-runner process with kiln's settings,
               kiln's event callback and its kiln_mitogen_linear strategy (batched workers over
               mitogen's linear strategy; mitogen comes with kiln's dependencies)
  kiln-linear  the same engine with KILN_MITOGEN=0: batched workers over Ansible's linear
               strategy (kiln_linear)
  kiln-unbatched  the same engine with KILN_MITOGEN=0 KILN_BATCH_WORKERS=0: Ansible's own
               linear strategy, a forked worker per host-task (kiln before batched workers)

All run the same trivial play (TASKS tasks: set_fact and debug, no module shipped) over hosts
with ansible_connection=local, so what is measured is the controller's own work: Ansible's
per-host-task bookkeeping (a forked worker per host-task; the part that grows with the
inventory a process holds) plus, for kiln, ansible-runner, the event recorder and the merging.

Cost = CPU seconds (user + sys) of the whole controller process tree / (N x tasks); kiln's own
Python (threads, recorder, merging; the memory sampler's thread left out) is shown apart. Memory =
the peak summed PSS of the tree (shared pages of forked workers counted once), sampled every
0.5 s; the summed RSS is kept too. Fits, by least squares over the sizes each engine ran: total
controller CPU T(N) = a + bN + cN^2, and, for kiln, a straight line (every shard holds
--shard-size hosts whatever N is). The 12,500-node projection and its model: docs/scale.md.

Busy forks (--busy, on by default): the trivial play's workers live a few milliseconds, but over
SSH every fork waits on its node. A second play holds each worker for --busy-seconds over
shard-size x parallel hosts (every parallel slot full) and measures what one running shard takes
then (its ansible-playbook main + 25 busy forks); the memory projection, and the shards x forks
that re-run fastest within 2 GiB, use it.

    python bench/scale_cost.py        # all four engines; N = 100 300 1000 3000 10000 on a machine
                                      # of 8 cores or more (what `make bench` runs), else 100..3000
    python bench/scale_cost.py --full              # N = 100 ... 10,000 whatever the machine
    python bench/scale_cost.py --hosts 100 300 1000 --engines stock kiln
    python bench/scale_cost.py --hosts 100 300 1000 3000 --engine-max stock=1000 --json
    python bench/scale_cost.py --from-json bench/results/scale_cost-2026-11-30.json  # re-fit
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

from kiln.inventory import require_valid
from kiln.inventory.schema import RolloutSpec
from kiln.plan import PlanOptions, make_plan, shards
from kiln.plan.stages import Stage
from kiln.records.lock import InventoryLock
from kiln.runner import engine
from kiln.runner.execute import execute

TASKS = 4
PLAY = """\
- name: Trivial tasks, controller cost only
  hosts: all
  gather_facts: false
  tasks:
    - name: Set a fact
      ansible.builtin.set_fact:
        bench_value: "{{ inventory_hostname }}"
    - name: Debug one
      ansible.builtin.debug:
        msg: "{{ bench_value }}"
    - name: Set another fact
      ansible.builtin.set_fact:
        bench_other: 1
    - name: Debug two
      ansible.builtin.debug:
        var: bench_other
"""
# The same play with no task: what a play costs whatever its tasks (start-up, inventory, the
# host loop, the recap; for kiln, every shard's ansible-runner and ansible-playbook). A host-task
# costs what the play above costs beyond this one, as the issue's own model separates them.
EMPTY_PLAY = """\
- name: No task, the play's fixed cost only
  hosts: all
  gather_facts: false
  tasks: []
"""
# Memory with every fork busy, as over SSH, where each host-task waits on its node: one task
# that holds its worker for a while (a `sleep` through the pipe lookup, in the worker).
BUSY_PLAY = """\
- name: Busy forks, memory only
  hosts: all
  gather_facts: false
  tasks:
    - name: Hold the worker as a remote task would
      ansible.builtin.set_fact:
        bench_wait: "{{{{ lookup('ansible.builtin.pipe', 'sleep {seconds}') }}}}"
"""
ENGINES = ("stock", "kiln", "kiln-linear", "kiln-unbatched")
# What each kiln engine sets in kiln's environment (kiln.runner.engine.strategy_settings reads it).
ENGINE_ENV = {
    "kiln": {"KILN_MITOGEN": "1", "KILN_BATCH_WORKERS": "1"},
    "kiln-linear": {"KILN_MITOGEN": "0", "KILN_BATCH_WORKERS": "1"},
    "kiln-unbatched": {"KILN_MITOGEN": "0", "KILN_BATCH_WORKERS": "0"},
}
SMALL_SIZES = [100, 300, 1000, 3000]
FULL_SIZES = [100, 300, 1000, 3000, 10_000]
FULL_FROM_CORES = 8  # `make bench` runs the full range from this many cores up
# Task counts of kiln's stages on a GPU compute node, counted in playbooks/ on 2026-11-30 (named
# tasks in the roles' tasks/ files; see docs/scale.md); a no-change re-run runs each of them once
# per host (skipped tasks are cheaper; counted in full).
STAGE_TASKS = {
    "preflight": 10,  # 9 role tasks + fact gathering
    "base": 11,
    "nvidia": 66,  # nvidia_driver 44, nvidia_repo 10, nvidia_dcgm 6, nvidia_cuda 5, gathering
    "infiniband": 39,
    "nccl": 17,  # 16 role tasks (11 of them only when nccl-tests is built) + gathering
    "slurm": 52,  # 49 role tasks on a compute node + 3 fact gatherings
    "power": 32,  # 31 role tasks + gathering
}
TARGET_NODES = 12_500
TARGET_CORES = 64
MEMORY_GOAL = 2 * 2**30
COST_GOAL_S = 0.005
# Per host-task remote latency of a no-change module task over SSH (the module's run on the
# node, overlapped across forks, so it bounds wall time only through forks x shards), measured by
# bench/remote_latency.py on the sandbox's nodes on 2026-11-30: Ansible's ssh connection with
# pipelining + ControlPersist, and mitogen's (kiln as shipped).
REMOTE_TASK_S = {"ssh": 0.44, "mitogen": 0.09}
CONNECTION = {"stock": "ssh", "kiln": "mitogen", "kiln-linear": "ssh", "kiln-unbatched": "ssh"}
FORKS = 25
PAGE = os.sysconf("SC_PAGE_SIZE")


class TreeSampler:
    """Peak summed PSS and RSS of this process's descendants, from /proc, every 0.5 s.

    The sampler's own CPU (its thread) is kept apart so it is not billed to kiln.
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self.peak_pss = 0
        self.peak_rss = 0
        self.peak_own = 0  # this process (kiln's own Python, for the kiln engines)
        self.peak_direct = 0  # at the PSS peak: RSS of root's children (ansible-playbook mains)
        self.cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            pss, rss, direct = tree_memory(self.root)
            if pss > self.peak_pss:
                self.peak_pss, self.peak_direct = pss, direct
            self.peak_rss = max(self.peak_rss, rss)
            with open(f"/proc/{self.root}/statm") as statm:
                self.peak_own = max(self.peak_own, int(statm.read().split()[1]) * PAGE)
        self.cpu_s = time.thread_time()


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_memory(root: int) -> tuple[int, int, int]:
    """(summed PSS, summed RSS) of root's descendants, root itself (this Python) left out, and
    the summed RSS of root's own children (every page of the ansible-playbook mains: the pages
    their forks share are theirs)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            parents[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, frontier = set(), [root]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in tree:
                tree.add(child)
                frontier.append(child)
    pss = {pid: _pss(pid) for pid in tree}
    direct = sum(rss.get(pid, 0) for pid in children.get(root, ()))
    return sum(pss.values()), sum(rss.get(pid, 0) for pid in tree), direct


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def write_inventory(directory: Path, hosts: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    names = {
        f"n{i:05d}": {"kiln_gpu_model": "none", "kiln_rack": f"r{i // 100:03d}"}
        for i in range(hosts)
    }
    document = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
            "children": {
                "kiln_controllers": {"hosts": {"ctl": {"kiln_gpu_model": "none"}}},
                "kiln_compute": {"hosts": names},
            },
        }
    }
    (directory / "hosts.yml").write_text(json.dumps(document))
    return directory


def run_stock(work: Path, inventory: Path, playbook: Path) -> dict:
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "ANSIBLE_FORKS": str(FORKS),
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_STDOUT_CALLBACK": "default",
        "ANSIBLE_CONFIG": str(work / "none.cfg"),
    }
    before, start = children_cpu(), time.monotonic()
    with TreeSampler(os.getpid()) as sampler:
        proc = subprocess.run(
            [
                str(Path(sys.executable).parent / "ansible-playbook"),
                "-i",
                str(inventory / "hosts.yml"),
                str(playbook),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            check=False,
        )
    if proc.returncode:
        raise SystemExit(f"stock ansible-playbook failed: {proc.stderr.decode()[-2000:]}")
    return {
        "wall_s": time.monotonic() - start,
        "cpu_s": children_cpu() - before,
        "pss": sampler.peak_pss,
        "rss": sampler.peak_rss,
        "mains_rss": sampler.peak_direct,
        "strategy": "linear",
        "processes": 1,
    }


def run_kiln(
    work: Path,
    inventory: Path,
    playbook: Path,
    shard_size: int,
    parallel: int,
    name: str,
    *,
    has_tasks: bool = True,
) -> dict:
    with mock.patch.dict(os.environ, ENGINE_ENV[name]):
        strategy = engine.strategy_settings().get("ANSIBLE_STRATEGY", "linear")
        cluster = require_valid(inventory)
        options = PlanOptions(
            stages=(Stage("bench", str(playbook), ""),),
            shard_by="count",
            shard_size=shard_size,
            max_parallel_shards=parallel,
            forks=FORKS,
        )
        before, start = children_cpu(), time.monotonic()
        own_before = time.process_time()
        with TreeSampler(os.getpid()) as sampler:
            # Planning stays inside the measured span, as it did when provision() planned.
            plan = make_plan(cluster, options, work / "state")
            with InventoryLock(plan.inventory_dir, home=work / "state") as held:
                summary = execute(plan, lock=held, home=work / "state").to_dict()
        own = time.process_time() - own_before - sampler.cpu_s
    # A play with no task leaves every host not_run (kiln's exit code 1); its shards' plays
    # must still have succeeded.
    played = all(shard["status"] == "successful" for shard in summary["stages"][0]["shards"])
    if summary["exit_code"] != 0 and not (played and not has_tasks):
        raise SystemExit(f"kiln run failed: {summary.get('stopped')}")
    record = Path(summary["record"])
    shards = summary["stages"][0]["shards"]
    return {
        "wall_s": time.monotonic() - start,
        "cpu_s": children_cpu() - before + own,
        "kiln_own_cpu_s": own,
        "pss": sampler.peak_pss,
        "rss": sampler.peak_rss,
        "mains_rss": sampler.peak_direct,
        "own_rss": sampler.peak_own,
        "strategy": strategy,
        "shards": len(shards),
        "processes": min(parallel, max(1, len(shards) - 1)),  # compute shards at once
        "record_bytes": sum(f.stat().st_size for f in record.rglob("*") if f.is_file()),
        "events": summary.get("events"),
    }


def fit(points: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Least squares y = a + bN + cN^2 (normal equations, Cramer's rule; no numpy)."""
    s = [sum(n**k for n, _ in points) for k in range(5)]
    t = [sum(y * n**k for n, y in points) for k in range(3)]
    matrix = [[s[0], s[1], s[2]], [s[1], s[2], s[3]], [s[2], s[3], s[4]]]

    def det(m: list[list[float]]) -> float:
        return (
            m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
        )

    whole = det(matrix)
    coefficients = []
    for column in range(3):
        swapped = [row[:] for row in matrix]
        for row in range(3):
            swapped[row][column] = t[row]
        coefficients.append(det(swapped) / whole)
    return coefficients[0], coefficients[1], coefficients[2]


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Least squares y = a + bN."""
    count = len(points)
    mean_n = sum(n for n, _ in points) / count
    mean_y = sum(y for _, y in points) / count
    slope = sum((n - mean_n) * (y - mean_y) for n, y in points) / sum(
        (n - mean_n) ** 2 for n, _ in points
    )
    return mean_y - slope * mean_n, slope, 0.0


def value_at(coefficients: tuple[float, float, float], n: float) -> float:
    a, b, c = coefficients
    return a + b * n + c * n * n


def per_task(coefficients: tuple[float, float, float], n: float) -> float:
    return value_at(coefficients, n) / (n * TASKS)


def tasks_cpu(row: dict) -> float:
    """CPU seconds the tasks cost: the play's beyond the empty play's at the same N (documents
    saved before the empty play was measured: the whole play's)."""
    return row["cpu_s"] - row.get("empty", {}).get("cpu_s", 0.0)


def rerun_wall(
    cpu_s: float, host_tasks: int, processes: int, forks: int, latency_s: float
) -> float:
    """Wall seconds of the re-run: CPU spread over the processes, or the nodes' latency
    overlapped across every fork, whichever bounds it."""
    return max(cpu_s / processes, host_tasks * latency_s / (forks * processes))


def projection(
    name: str,
    rows: list[dict],
    cpu_fit: tuple[float, float, float],
    play_fit: tuple[float, float, float],
    parallel: int,
    busy: dict | None = None,
) -> dict:
    """A no-change re-run of TARGET_NODES nodes on one TARGET_CORES-core controller (the model
    is in docs/scale.md): CPU = host-tasks x CPU per host-task + stages x the empty play's CPU
    at TARGET_NODES, spread over the processes, or the nodes' latency, whichever bounds it."""
    host_tasks = TARGET_NODES * sum(STAGE_TASKS.values())
    cpu = per_task(cpu_fit, TARGET_NODES)
    plays = len(STAGE_TASKS) * max(0.0, value_at(play_fit, TARGET_NODES))
    total_cpu = host_tasks * cpu + plays
    latency = REMOTE_TASK_S[CONNECTION[name]]
    if name == "stock":
        processes = 1  # one single-threaded controller loop
        memory = fit_line([(r["hosts"], r["pss"]) for r in rows])
        memory_at_target = memory[0] + memory[1] * TARGET_NODES
        if busy is not None:  # plus what busy forks add over the trivial play's short ones
            at = min(rows, key=lambda r: abs(r["hosts"] - busy["hosts"]))
            memory_at_target += max(0, busy["pss"] - at["pss"])
    else:
        processes = TARGET_CORES  # one shard per core
        # Every running shard holds shard_size hosts whatever N is: memory = shards running x
        # what one running shard takes, plus kiln's own Python (linear in N). One shard's share
        # is read where every parallel slot was busy (compute shards >= parallel).
        full = [r for r in rows if r["shards"] - 1 >= parallel] or rows
        per_shard = max(r["pss"] / r["processes"] for r in full)
        if busy is not None:  # what a shard takes with all its forks busy, as over SSH
            per_shard = busy["per_shard"]
        own = fit_line([(r["hosts"], r["own_rss"]) for r in rows])
        own_at_target = own[0] + own[1] * TARGET_NODES
        memory_at_target = processes * per_shard + own_at_target
    wall = rerun_wall(total_cpu, host_tasks, processes, FORKS, latency)
    result = {
        "host_tasks": host_tasks,
        "cost_per_host_task_ms": cpu * 1e3,
        "plays_cpu_s": plays,
        "remote_latency_s": latency,
        "processes": processes,
        "no_change_rerun_h": wall / 3600,
        "memory_gib": memory_at_target / 2**30,
    }
    if name != "stock":
        # the most shards that fit the memory goal, and the re-run time at that many
        fits = int((MEMORY_GOAL - own_at_target) // per_shard)
        fits = max(1, min(TARGET_CORES, fits))
        result["per_shard_mib"] = per_shard / 2**20
        result["own_gib"] = own_at_target / 2**30
        result["shards_within_2gib"] = fits
        result["no_change_rerun_within_2gib_h"] = (
            rerun_wall(total_cpu, host_tasks, fits, FORKS, latency) / 3600
        )
        if busy is not None and "per_fork" in busy:
            result["best_within_2gib"] = best_within(
                host_tasks, total_cpu, busy["base"], busy["per_fork"], own_at_target, latency
            )
        # kiln's defaults on that controller: as many shards at once as kiln's estimate fits
        # into controller_memory_gib, at most one per core; memory from what was measured
        defaults = RolloutSpec()
        at_once = shards.parallel_limit(
            0,
            TARGET_NODES,
            cpu_count=TARGET_CORES,
            forks=defaults.forks,
            memory_gib=defaults.controller_memory_gib,
        )
        result["defaults"] = {
            "shards": at_once,
            "forks": defaults.forks,
            "memory_gib": (at_once * per_shard + own_at_target) / 2**30,
            "no_change_rerun_h": (
                rerun_wall(total_cpu, host_tasks, at_once, defaults.forks, latency) / 3600
            ),
        }
    return result


def best_within(
    host_tasks: int, total_cpu: float, base: float, per_fork: float, own: float, latency_s: float
) -> dict:
    """The shards at once x forks per shard that re-run fastest within the memory goal, with
    memory = shards x (main + forks x per busy fork) + kiln's own."""
    best: dict = {}
    for forks in range(1, 4 * FORKS + 1):
        count = min(TARGET_CORES, int((MEMORY_GOAL - own) // (base + forks * per_fork)))
        if count < 1:
            continue
        wall = rerun_wall(total_cpu, host_tasks, count, forks, latency_s)
        if not best or wall < best["wall_s"]:
            memory = count * (base + forks * per_fork) + own
            best = {"shards": count, "forks": forks, "wall_s": wall, "memory": memory}
    if best:
        best["no_change_rerun_h"] = best.pop("wall_s") / 3600
        best["memory_gib"] = best.pop("memory") / 2**30
    return best


def describe(name: str, n: int, r: dict, baseline: dict | None) -> str:
    ht = n * TASKS
    text = (
        f"N={n:>6}  {name:<14} {r['wall_s']:7.1f} s wall {r['cpu_s']:8.1f} s cpu "
        f"{tasks_cpu(r) / ht * 1e3:6.2f} ms/host-task"
    )
    if "empty" in r:
        text += f" (empty play {r['empty']['cpu_s']:.1f} s cpu)"
    text += f"  PSS {r['pss'] / 2**20:6.0f} MiB (RSS {r['rss'] / 2**20:6.0f})  {r['strategy']}"
    if "shards" in r:
        text += (
            f", {r['shards']} shards; kiln's own {r['kiln_own_cpu_s'] / ht * 1e3:.2f} ms/host-task"
        )
    if baseline is not None:
        text += (
            f"; / stock: per host-task x{tasks_cpu(r) / tasks_cpu(baseline):.2f},"
            f" whole play cpu x{r['cpu_s'] / baseline['cpu_s']:.2f}"
            f" wall x{r['wall_s'] / baseline['wall_s']:.2f}"
        )
    return text


def measure_busy(engines: list[str], shard_size: int, parallel: int, seconds: float) -> dict:
    """Peak memory with all forks busy: shard_size x parallel hosts, so that every parallel
    slot holds a full shard; per running shard = peak PSS / shards running."""
    hosts = shard_size * parallel
    busy: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="kiln-busy-") as tmp:
        work = Path(tmp)
        playbook = work / "play" / "busy.yml"
        playbook.parent.mkdir()
        playbook.write_text(BUSY_PLAY.format(seconds=seconds))
        (work / "none.cfg").write_text("")
        inventory = write_inventory(work / "inv", hosts)
        for name in engines:
            if name == "stock":  # one process: 25 busy forks over a few rounds are enough
                stock_hosts = min(hosts, 2 * shard_size)
                result = run_stock(work, write_inventory(work / "stock", stock_hosts), playbook)
            else:
                result = run_kiln(work / name, inventory, playbook, shard_size, parallel, name)
            per_shard = result["pss"] / result["processes"]
            # a shard = its ansible-playbook main (all of its pages) + what each busy fork adds
            # (its private pages; mitogen's multiplexer is counted with the forks)
            base = result["mains_rss"] / result["processes"]
            per_fork = max(0.0, per_shard - base) / min(FORKS, shard_size)  # forks busy
            busy[name] = {
                "hosts": stock_hosts if name == "stock" else hosts,
                "seconds": seconds,
                "per_shard": per_shard,
                "base": base,
                "per_fork": per_fork,
                **result,
            }
            print(
                f"busy forks ({busy[name]['hosts']} hosts, each task holding its worker "
                f"{seconds:g} s): "
                f"{name:<14} peak PSS {result['pss'] / 2**20:6.0f} MiB over "
                f"{result['processes']} process(es): {per_shard / 2**20:.0f} MiB each "
                f"({base / 2**20:.0f} MiB main + {FORKS} forks x {per_fork / 2**20:.1f} MiB)",
                file=sys.stderr,
                flush=True,
            )
    return busy


def run_all(args: argparse.Namespace) -> dict:
    """Every engine at every size, one after the other at each N; returns the runs document."""
    if args.full or (args.hosts is None and (os.cpu_count() or 1) >= FULL_FROM_CORES):
        sizes = FULL_SIZES
    else:
        sizes = sorted(set(args.hosts or SMALL_SIZES))
    limits = {key: int(value) for key, value in (item.split("=", 1) for item in args.engine_max)}
    runs: dict[str, list[dict]] = {name: [] for name in args.engines}
    print(
        "baseline 'stock': one stock ansible-playbook process over all N hosts (linear "
        f"strategy); kiln: shards of {args.shard_size}, {args.parallel} at once, forks {FORKS}; "
        f"{TASKS} trivial tasks, local connection",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="kiln-scale-") as tmp:
        work = Path(tmp)
        playbook = work / "play" / "bench.yml"
        playbook.parent.mkdir()
        playbook.write_text(PLAY)
        empty = work / "play" / "empty.yml"
        empty.write_text(EMPTY_PLAY)
        (work / "none.cfg").write_text("")

        def run(name: str, n: int, inventory: Path, play: Path) -> dict:
            if name == "stock":
                return run_stock(work, inventory, play)
            where = work / f"{name}{n}-{play.stem}"
            size, parallel = args.shard_size, args.parallel
            return run_kiln(where, inventory, play, size, parallel, name, has_tasks=play != empty)

        for n in sizes:
            inventory = write_inventory(work / f"inv{n}", n)
            baseline = None
            for name in args.engines:
                if n > limits.get(name, n):
                    continue
                without_tasks = run(name, n, inventory, empty)
                result = run(name, n, inventory, playbook)
                result["empty"] = {key: without_tasks[key] for key in ("wall_s", "cpu_s")}
                if name == "stock":
                    baseline = result
                runs[name].append({"hosts": n, **result})
                compare = baseline if name != "stock" else None
                print(describe(name, n, result, compare), file=sys.stderr, flush=True)
    return {
        "tasks": TASKS,
        "shard_size": args.shard_size,
        "parallel": args.parallel,
        "forks": FORKS,
        "runs": runs,
    }


def report(document: dict) -> dict:
    """Fits and the 12,500-node projection of a runs document; printed on stderr, and added."""
    runs = document["runs"]
    document["fits"], document["projection"] = {}, {}
    for name, rows in runs.items():
        if len(rows) < 3:
            continue
        # T(N): the CPU the play's tasks cost over N hosts (beyond the empty play's), and
        # E(N): the empty play's own
        points = [(r["hosts"], tasks_cpu(r)) for r in rows]
        quadratic = fit(points)
        line = fit_line(points)
        empty = [(r["hosts"], r["empty"]["cpu_s"]) for r in rows if "empty" in r]
        play_quadratic = fit(empty) if len(empty) >= 3 else (0.0, 0.0, 0.0)
        play_line = fit_line(empty) if len(empty) >= 2 else (0.0, 0.0, 0.0)
        document["fits"][name] = {
            "quadratic": quadratic,
            "line": line,
            "empty_quadratic": play_quadratic,
            "empty_line": play_line,
        }
        # kiln: every shard holds at most shard_size hosts, so its cost is linear in N; a tiny
        # or negative c from noise must not be extrapolated
        use, play = (quadratic, play_quadratic) if name == "stock" else (line, play_line)
        busy = document.get("busy", {}).get(name)
        document["projection"][name] = projection(name, rows, use, play, document["parallel"], busy)
        a, b, c = quadratic
        text = (
            f"{name:>14}: tasks T(N) = {a:.3g} + {b:.3g} N + {c:.3g} N^2 s; "
            f"per host-task at 12,500: {per_task(quadratic, TARGET_NODES) * 1e3:.2f} ms"
        )
        if name != "stock":
            text += (
                f"; straight line {line[0]:.3g} + {line[1]:.3g} N s: "
                f"{per_task(line, TARGET_NODES) * 1e3:.2f} ms"
            )
        if empty:
            pa, pb, pc = play
            text += f"; empty play E(N) = {pa:.3g} + {pb:.3g} N + {pc:.3g} N^2 s"
        print(text, file=sys.stderr)
    stock = document["projection"].get("stock")
    for name, p in document["projection"].items():
        ratio = (
            f", x{p['cost_per_host_task_ms'] / stock['cost_per_host_task_ms']:.2f} of stock"
            if stock and name != "stock"
            else ""
        )
        goal = "meets" if p["cost_per_host_task_ms"] <= COST_GOAL_S * 1e3 else "misses"
        text = (
            f"{name:>14} at {TARGET_NODES} nodes x {sum(STAGE_TASKS.values())} tasks: "
            f"{p['cost_per_host_task_ms']:.2f} ms per host-task{ratio} ({goal} the 5 ms goal); "
            f"{len(STAGE_TASKS)} stages' plays {p['plays_cpu_s']:.0f} s cpu; "
            f"no-change re-run on {p['processes']} process(es) {p['no_change_rerun_h']:.2f} h; "
            f"memory {p['memory_gib']:.2f} GiB"
        )
        if "per_shard_mib" in p:
            text += (
                f" ({p['per_shard_mib']:.0f} MiB per running shard; {p['shards_within_2gib']} "
                f"shards fit 2 GiB: re-run {p['no_change_rerun_within_2gib_h']:.2f} h)"
            )
        if p.get("defaults"):
            d = p["defaults"]
            text += (
                f"; kiln's defaults ({d['shards']} shards x {d['forks']} forks): re-run "
                f"{d['no_change_rerun_h']:.2f} h, {d['memory_gib']:.2f} GiB"
            )
        if p.get("best_within_2gib"):
            b = p["best_within_2gib"]
            text += (
                f"; fastest within 2 GiB: {b['shards']} shards x {b['forks']} forks, re-run "
                f"{b['no_change_rerun_h']:.2f} h, {b['memory_gib']:.2f} GiB"
            )
        print(text, file=sys.stderr)
    return document


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hosts",
        type=int,
        nargs="+",
        help=f"sizes (default {FULL_SIZES} from {FULL_FROM_CORES} cores up, else {SMALL_SIZES})",
    )
    parser.add_argument("--full", action="store_true", help=f"N = {FULL_SIZES}")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument(
        "--engine-max",
        nargs="+",
        default=[],
        metavar="ENGINE=N",
        help="run ENGINE only up to N hosts (e.g. stock=1000 on a small machine)",
    )
    parser.add_argument(
        "--shard-size",
        type=int,
        default=RolloutSpec().shard_size,
        help="hosts per kiln shard (default: kiln's own, kiln_rollout.shard_size)",
    )
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="FILE",
        help="run nothing: fit and project the runs a previous --json run saved",
    )
    parser.add_argument(
        "--busy",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also measure memory with every fork busy (on by default; off with --from-json)",
    )
    parser.add_argument("--busy-seconds", type=float, default=1.0)
    parser.add_argument("--json", action="store_true", help="print the whole document on stdout")
    args = parser.parse_args()
    if args.from_json:
        document = json.loads(args.from_json.read_text())
        for name, rows in document["runs"].items():
            stock = {r["hosts"]: r for r in document["runs"].get("stock", [])}
            for r in rows:
                compare = stock.get(r["hosts"]) if name != "stock" else None
                print(describe(name, r["hosts"], r, compare), file=sys.stderr)
        for name, b in document.get("busy", {}).items():
            print(
                f"busy forks ({b['hosts']} hosts, {b['seconds']:g} s): {name:<14} peak PSS "
                f"{b['pss'] / 2**20:.0f} MiB, {b['per_shard'] / 2**20:.0f} MiB per process "
                f"({b['base'] / 2**20:.0f} MiB main + {FORKS} forks x "
                f"{b['per_fork'] / 2**20:.1f} MiB)",
                file=sys.stderr,
            )
    else:
        document = run_all(args)
    if args.busy or (args.busy is None and not args.from_json):
        engines = list(document["runs"])
        document["busy"] = measure_busy(
            engines, document["shard_size"], document["parallel"], args.busy_seconds
        )
    report(document)
    if args.json:
        print(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
