"""Controller cost per host-task: kiln's sharded engine beside one stock ansible-playbook.

Both run the same trivial play (TASKS tasks: set_fact and debug, no module shipped) over N
hosts with ansible_connection=local, so what is measured is the controller's own cost: Ansible's
per-host-task bookkeeping (which grows with the inventory it holds) plus, for kiln, ansible-runner
and the event recorder. Cost = CPU seconds of the whole process tree (user + sys) / (N x tasks);
peak memory = the largest summed RSS of that tree, sampled every 0.2 s.

Fits, by least squares over the sizes run: total controller CPU T(N) = a + bN + cN^2, shown as
the cost per host-task T(N) / (N x tasks). The projection for 12,500 nodes is in docs/scale.md:

    python bench/scale_cost.py                 # N = 100 300 1000 3000 (about 10 min, 2 cores)
    python bench/scale_cost.py --full          # adds 10,000
    python bench/scale_cost.py --hosts 100 300 --shard-size 100 --json
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

from kiln.inventory import require_valid
from kiln.runner.provision import ProvisionOptions, provision
from kiln.runner.stages import Stage

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
# Task counts of kiln's stages, counted in playbooks/ (see docs/scale.md); a no-change re-run
# runs each of them once per host (skipped tasks are cheaper; counted in full).
STAGE_TASKS = {
    "preflight": 8,  # 7 role tasks + fact gathering
    "base": 11,
    "nvidia": 30,  # playbook not written yet: an estimate
    "infiniband": 39,
    "nccl": 10,  # estimate
    "slurm": 52,  # 49 role tasks + 3 fact gatherings
    "power": 10,  # estimate
}
TARGET_NODES = 12_500
TARGET_CORES = 64
# Per host-task remote latency over SSH with pipelining + ControlPersist (module run on the
# node): overlapped across forks, so it bounds wall time only through forks per shard.
REMOTE_TASK_S = 0.35
FORKS = 25


class TreeSampler:
    """Peak summed RSS of a process and its descendants, from /proc."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, tree_rss(self.root))


def tree_rss(root: int) -> int:
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            parents[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    # the root's own RSS (this Python) is not the controller's work
    return sum(rss.get(pid, 0) for pid in tree if pid != root)


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
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inventory / "hosts.yml"),
            str(playbook),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    with TreeSampler(os.getpid()) as sampler:
        _, stderr = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"stock ansible-playbook failed: {stderr.decode()[-2000:]}")
    return {
        "wall_s": time.monotonic() - start,
        "cpu_s": children_cpu() - before,
        "rss": sampler.peak,
    }


def run_kiln(work: Path, inventory: Path, playbook: Path, shard_size: int, parallel: int) -> dict:
    cluster = require_valid(inventory)
    options = ProvisionOptions(
        stages=[Stage("bench", str(playbook), "")],
        shard_by="count",
        shard_size=shard_size,
        max_parallel_shards=parallel,
        forks=FORKS,
    )
    before, start = children_cpu(), time.monotonic()
    self_before = time.process_time()
    with TreeSampler(os.getpid()) as sampler:
        summary = provision(cluster, options, state=work / "state")
    if summary["exit_code"] != 0:
        raise SystemExit(f"kiln run failed: {summary.get('stopped')}")
    own = time.process_time() - self_before  # kiln's own Python: threads, recorder, merging
    return {
        "wall_s": time.monotonic() - start,
        "cpu_s": children_cpu() - before + own,
        "kiln_own_cpu_s": own,
        "rss": sampler.peak,
        "shards": len(summary["stages"][0]["shards"]),
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


def per_task(coefficients: tuple[float, float, float], n: float) -> float:
    a, b, c = coefficients
    return (a + b * n + c * n * n) / (n * TASKS)


def projection(stock: tuple, kiln: tuple, shard_size: int) -> dict:
    host_tasks = TARGET_NODES * sum(STAGE_TASKS.values())
    stock_cpu = per_task(stock, TARGET_NODES)
    # Every kiln shard holds shard_size hosts whatever N is, so its cost is linear in N: the
    # slope of a straight-line fit (a negative or tiny c from noise must not be extrapolated).
    kiln_cpu = per_task((kiln[0], kiln[1], 0.0), TARGET_NODES)
    # Stock: one process, single-threaded controller; remote latency overlaps across forks.
    stock_wall = host_tasks * max(stock_cpu, REMOTE_TASK_S / FORKS)
    # kiln: shards in parallel, one per core; each shard's floor is its remote latency.
    kiln_wall = host_tasks * max(kiln_cpu / TARGET_CORES, REMOTE_TASK_S / (FORKS * TARGET_CORES))
    return {
        "host_tasks": host_tasks,
        "stock_cost_per_host_task_ms": stock_cpu * 1e3,
        "kiln_cost_per_host_task_ms": kiln_cpu * 1e3,
        "stock_no_change_rerun_h": stock_wall / 3600,
        "kiln_no_change_rerun_h": kiln_wall / 3600,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[100, 300, 1000, 3000])
    parser.add_argument("--full", action="store_true", help="add 10,000 hosts")
    parser.add_argument("--shard-size", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = sorted(set(args.hosts + ([10_000] if args.full else [])))
    os.environ.setdefault("KILN_MITOGEN", "0")  # the same stock strategy on both sides
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-scale-") as tmp:
        work = Path(tmp)
        playbook = work / "play" / "bench.yml"
        playbook.parent.mkdir()
        playbook.write_text(PLAY)
        (work / "none.cfg").write_text("")
        for n in sizes:
            inventory = write_inventory(work / f"inv{n}", n)
            stock = run_stock(work, inventory, playbook)
            kiln = run_kiln(work / f"k{n}", inventory, playbook, args.shard_size, args.parallel)
            row = {"hosts": n, "stock": stock, "kiln": kiln}
            rows.append(row)
            print(
                f"N={n:>6}  stock {stock['wall_s']:7.1f} s wall {stock['cpu_s']:7.1f} s cpu "
                f"{stock['cpu_s'] / (n * TASKS) * 1e3:6.2f} ms/host-task "
                f"{stock['rss'] / 2**20:7.0f} MiB"
                f" | kiln {kiln['wall_s']:7.1f} s wall {kiln['cpu_s']:7.1f} s cpu "
                f"{kiln['cpu_s'] / (n * TASKS) * 1e3:6.2f} ms/host-task "
                f"{kiln['rss'] / 2**20:7.0f} MiB "
                f"({kiln['shards']} shards)",
                file=sys.stderr,
                flush=True,
            )
    result: dict = {"rows": rows, "tasks": TASKS, "shard_size": args.shard_size}
    if len(rows) >= 3:
        stock_fit = fit([(r["hosts"], r["stock"]["cpu_s"]) for r in rows])
        kiln_fit = fit([(r["hosts"], r["kiln"]["cpu_s"]) for r in rows])
        kiln_line = fit_line([(r["hosts"], r["kiln"]["cpu_s"]) for r in rows])
        result.update(stock_fit=stock_fit, kiln_fit=kiln_fit, kiln_line=kiln_line)
        result["projection"] = projection(stock_fit, kiln_line, args.shard_size)
        for name, (a, b, c) in (("stock", stock_fit), ("kiln", kiln_fit)):
            print(
                f"{name:>5}: controller CPU T(N) = {a:.3g} + {b:.3g} N + {c:.3g} N^2 s "
                f"({TASKS} tasks); per host-task at 12,500: "
                f"{per_task((a, b, c), TARGET_NODES) * 1e3:.2f} ms",
                file=sys.stderr,
            )
        a, b, _ = kiln_line
        print(f" kiln: straight line T(N) = {a:.3g} + {b:.3g} N s", file=sys.stderr)
        p = result["projection"]
        print(
            f"no-change re-run of {TARGET_NODES} nodes x {sum(STAGE_TASKS.values())} tasks on "
            f"{TARGET_CORES} cores: stock one process {p['stock_no_change_rerun_h']:.1f} h, "
            f"kiln sharded {p['kiln_no_change_rerun_h']:.2f} h",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
