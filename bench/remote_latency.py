"""Remote latency of a no-change host-task over SSH: mitogen's connection beside Ansible's ssh.

bench/scale_cost.py bounds a re-run's wall time by the time each host-task waits on its node
(overlapped across forks). This measures that wait on real SSH hosts (the sandbox's nodes by
default): kiln's engine (kiln.runner.execute) runs a play of no-change module tasks (stat,
command, file, copy, in turn) on every host of the inventory, with TASKS_FEW and then TASKS_MANY
tasks, three times each after a first run that makes the copies. The wall time per task is the
slope between the two (start-up cancels out); every host runs each task at once, so that slope
is one host-task's latency. Engines:

  mitogen  kiln as shipped: batched workers over mitogen's linear strategy
  ssh      KILN_MITOGEN=0: batched workers over Ansible's linear strategy, ssh with pipelining
           and ControlPersist

    kiln sandbox up --nodes 2
    python bench/remote_latency.py ~/.kiln/sandbox/inventory
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from kiln.inventory import require_valid
from kiln.plan import PlanOptions, make_plan
from kiln.plan.stages import Stage
from kiln.records.lock import InventoryLock
from kiln.runner.execute import execute

TASKS_FEW = 4
TASKS_MANY = 48
RUNS = 3
ENGINES = {"mitogen": {"KILN_MITOGEN": "1"}, "ssh": {"KILN_MITOGEN": "0"}}
TASK_GROUP = """\
    - name: Stat {i}
      ansible.builtin.stat:
        path: /etc/hostname
    - name: Command {i}
      ansible.builtin.command: /bin/true
      changed_when: false
    - name: Directory {i}
      ansible.builtin.file:
        path: /tmp
        state: directory
    - name: Copy {i}
      ansible.builtin.copy:
        content: "kiln\\n"
        dest: /tmp/kiln-latency-{i}
        mode: "0644"
"""


def write_play(directory: Path, tasks: int) -> Path:
    play = directory / f"latency{tasks}.yml"
    header = "- name: No-change module tasks\n  hosts: all\n  gather_facts: false\n  tasks:\n"
    play.write_text(header + "".join(TASK_GROUP.format(i=i) for i in range(tasks // 4)))
    return play


def timed_runs(cluster, play: Path, state: Path) -> list[float]:
    """Wall seconds of RUNS no-change runs, after one run that makes the copies."""
    walls = []
    for attempt in range(RUNS + 1):
        start = time.monotonic()
        options = PlanOptions(stages=(Stage("latency", str(play), ""),))
        plan = make_plan(cluster, options, state)
        with InventoryLock(plan.inventory_dir, home=state) as held:  # as a command takes it
            summary = execute(plan, lock=held, home=state).to_dict()
        if summary["exit_code"] != 0:
            raise SystemExit(f"the latency play failed: {summary.get('stopped')}")
        if attempt:
            walls.append(time.monotonic() - start)
    return walls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", type=Path, help="an inventory of reachable hosts")
    args = parser.parse_args()
    cluster = require_valid(args.inventory)
    hosts = len(cluster.nodes)
    with tempfile.TemporaryDirectory(prefix="kiln-latency-") as tmp:
        work = Path(tmp)
        few, many = write_play(work, TASKS_FEW), write_play(work, TASKS_MANY)
        for name, env in ENGINES.items():
            with mock.patch.dict(os.environ, env):
                short = min(timed_runs(cluster, few, work / "state"))
                long = min(timed_runs(cluster, many, work / "state"))
            per_task = (long - short) / (TASKS_MANY - TASKS_FEW)
            print(
                f"{name:<8} {hosts} hosts: {TASKS_FEW} tasks {short:.1f} s, {TASKS_MANY} tasks "
                f"{long:.1f} s (best of {RUNS} no-change runs): {per_task:.3f} s per host-task",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
