"""Benchmark: `kiln validate` and `kiln plan` beside `ansible-inventory --list`, paired.

Every side runs as a user runs it: the venv's `kiln validate INV`, `kiln plan INV --output DIR`
and `ansible-inventory -i INV --list`, each a whole process, on the same generated inventory.
Each size runs --pairs rounds; a round runs the three once each, the order alternating from one
round to the next (a busy moment hits every side, and neither always goes first). Per side: min
and median wall time, and the peak RSS; per round: kiln's time over ansible-inventory's, whose
median is the figure held to the goal. Every run must exit 0, and both sides must read the same
hosts (the hosts in ansible-inventory's JSON == the controllers and compute nodes kiln reports).
Goals at 12,500 nodes: validate at most 0.08x ansible-inventory, plan at most 0.1x (issue 21);
validate and plan together, a round's two kiln times summed over its ansible-inventory time, at
most 0.15x (issue 29: what a user pays to check and then plan an inventory).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kiln.examples import write_example

BIN = Path(sys.executable).parent
GOALS = {"validate": 0.08, "plan": 0.10, "val+plan": 0.15}  # issues 21 and 29, at GOAL_NODES
GOAL_NODES = 12500
COUNTS = re.compile(r"(\d+) controller\(s\), (\d+) compute nodes")


def timed(argv: list[str], work: Path) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and stdout of one child process, which must exit 0. The
    output goes to files, not pipes: ansible-inventory's JSON is megabytes."""
    with open(work / "stdout", "w+b") as stdout, open(work / "stderr", "w+b") as stderr:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        text = stdout.read().decode()
        if child.returncode != 0:
            sys.exit(f"{argv} exited {child.returncode}:\n{stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024, text


def ansible_hosts(text: str) -> int:
    """The hosts in `ansible-inventory --list`: every group's hosts and every hostvars key."""
    data = json.loads(text)
    hosts = set(data.get("_meta", {}).get("hostvars", {}))
    for name, group in data.items():
        if name != "_meta":
            hosts.update(group.get("hosts", ()))
    return len(hosts)


def kiln_hosts(text: str) -> int:
    match = COUNTS.search(text)
    if match is None:
        sys.exit(f"kiln printed no host counts:\n{text[-2000:]}")
    return int(match[1]) + int(match[2])


def measure(nodes: int, pairs: int, work: Path, skip_ansible: bool) -> dict[str, list]:
    inventory = work / f"inv{nodes}"
    write_example(inventory, nodes)
    commands = {
        "ansible": [str(BIN / "ansible-inventory"), "-i", str(inventory), "--list"],
        "validate": [str(BIN / "kiln"), "validate", str(inventory)],
        "plan": [str(BIN / "kiln"), "plan", str(inventory), "--output", str(work / "out")],
    }
    if skip_ansible:
        del commands["ansible"]
    walls: dict[str, list] = {name: [] for name in commands}
    walls.update(rss={})
    for round_ in range(pairs):
        order = list(commands) if round_ % 2 == 0 else list(reversed(commands))
        for name in order:
            wall, mib, text = timed(commands[name], work)
            walls[name].append(wall)
            walls["rss"][name] = max(mib, walls["rss"].get(name, 0.0))
            count = ansible_hosts(text) if name == "ansible" else kiln_hosts(text)
            walls.setdefault("hosts", {}).setdefault(name, set()).add(count)
    counts = {count for seen in walls["hosts"].values() for count in seen}
    if len(counts) != 1:
        sys.exit(f"{nodes} nodes: the sides read different hosts: {walls['hosts']}")
    walls["host_count"] = counts.pop()
    # Issue 29's figure: validate and plan of the same round, summed, so each sum is paired with
    # that round's ansible-inventory run like the single sides are.
    if "validate" in walls and "plan" in walls:
        walls["val+plan"] = [v + p for v, p in zip(walls["validate"], walls["plan"], strict=True)]
        walls["rss"]["val+plan"] = max(walls["rss"]["validate"], walls["rss"]["plan"])
    return walls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1250,5000,12500")
    parser.add_argument("--pairs", type=int, default=3, help="paired rounds per size")
    parser.add_argument(
        "--skip-ansible",
        action="store_true",
        help="skip the ansible-inventory baseline (slow: ~18 s a run at 12,500)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-"))
    print(
        f"{'nodes':>6} {'hosts':>6} {'side':<9} {'min s':>7} {'median s':>9} {'MiB':>5} "
        f"{'us/node':>8} {'kiln/ansible (median of pairs)':>31} {'goal':>16}"
    )
    failed = []
    try:
        for nodes in sizes:
            walls = measure(nodes, args.pairs, work, args.skip_ansible)
            for name in ("ansible", "validate", "plan", "val+plan"):
                if name not in walls:
                    continue
                low, mid = min(walls[name]), statistics.median(walls[name])
                ratio = goal = ""
                if name != "ansible" and "ansible" in walls:
                    pairs = [k / a for k, a in zip(walls[name], walls["ansible"], strict=True)]
                    median = statistics.median(pairs)
                    ratio = f"{median:.3f}x (min/min {low / min(walls['ansible']):.3f}x)"
                    if nodes == GOAL_NODES:
                        met = median <= GOALS[name]
                        goal = f"<= {GOALS[name]}x {'met' if met else 'NOT met'}"
                        failed += [] if met else [f"{name} {median:.3f}x > {GOALS[name]}x"]
                print(
                    f"{nodes:>6} {walls['host_count']:>6} {name:<9} {low:>7.2f} {mid:>9.2f} "
                    f"{walls['rss'][name]:>5.0f} {low / nodes * 1e6:>8.0f} {ratio:>31} {goal:>16}",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        print(f"goal NOT met at {GOAL_NODES} nodes: {'; '.join(failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
