"""The disruption budget on the sandbox's real Slurm, through kiln's own runner: a rolling change
in shards of one node (`shard_by: count`, `shard_size: 1`: the controllers' shard, then one
shard per compute node, run in parallel) with `batch_size: 1` never has more than one node
drained at once, sampled from sinfo on the controller all through the run.

The stage is a test playbook (slurm_maintenance's rolling step, as the nvidia, infiniband and
nccl stages call it) in a temporary playbooks directory beside links to kiln's roles and filter
plugins, run by kiln.runner.execute exactly as `kiln provision` runs a stage: one ansible-runner
process per shard, kiln_disruption_budget from the plan. Its change sleeps, so without the
budget the shards' drains would overlap; it also fails itself if it sees another node drained
for maintenance. Every node ends back in service (the test resumes any it left).
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from kiln.inventory import require_valid
from kiln.plan import PlanOptions, make_plan
from kiln.plan.stages import Stage
from kiln.records.lock import InventoryLock
from kiln.runner.execute import execute
from kiln.sandbox import config

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CTL = config.CONTROLLER
PLAY = """\
---
- name: A rolling change in batches of kiln_batch_size, one shard of the run
  hosts: kiln_controllers:kiln_compute
  gather_facts: false
  become: true
  serial: "{{ kiln_batch_size }}"
  max_fail_percentage: 0
  tasks:
    - name: Roll the test change
      ansible.builtin.include_role:
        name: slurm_maintenance
        tasks_from: rolling
      vars:
        slurm_maintenance_change: budget test
        slurm_maintenance_timeout_s: 60
        slurm_maintenance_poll_s: 1
        slurm_maintenance_budget_wait_s: 240
        slurm_maintenance_apply: "{{ playbook_dir }}/apply.yml"
"""
APPLY = """\
---
- name: Fail when another node is drained for maintenance while this one is changed
  ansible.builtin.shell: >-
    sinfo --noheader --Node --format='%N|%T|%E' | grep -E '^[^|]+[|]drain[a-z]*[|]kiln:maintenance:'
    | grep -v '^{{ inventory_hostname }}|' | sort -u; sleep 4
  delegate_to: "{{ groups['kiln_controllers'][0] }}"
  register: __others
  changed_when: true
  failed_when: __others.stdout | length > 0
"""


def drained_reasons() -> dict[str, str]:
    """Node -> reason of every drained (or draining) node. Slurm 23.11+ keeps a resumed node's
    last reason (Debian 13's 24.11 shows it beside "idle"), so a reason alone is no drain."""
    out = subprocess.run(
        ["docker", "exec", CTL, "sinfo", "--noheader", "--Node", "--format", "%N|%T|%E"],
        capture_output=True, text=True, check=False, timeout=30,
    ).stdout  # fmt: skip
    rows = [line.split("|", 2) for line in out.splitlines() if line.count("|") >= 2]
    return {name: reason for name, state, reason in rows if state.startswith("drain")}


def maintenance_drains() -> set[str]:
    return {name for name, reason in drained_reasons().items() if "kiln:maintenance:" in reason}


def resume_ours(run_id: str) -> None:
    for name, reason in drained_reasons().items():
        if reason.startswith(f"kiln:maintenance:{run_id}:"):
            subprocess.run(["docker", "exec", CTL, "scontrol", "update", f"nodename={name}",
                            "state=resume"], check=False, timeout=30)  # fmt: skip


def test_shards_in_parallel_never_drain_more_than_the_budget(provisioned_sandbox, tmp_path):
    assert maintenance_drains() == set(), "a maintenance drain is left on the sandbox"
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "budget.yml").write_text(PLAY)
    (playbooks / "apply.yml").write_text(APPLY)
    for name in ("roles", "filter_plugins"):
        (playbooks / name).symlink_to(ROOT / "playbooks" / name)
    stage = Stage("budget", str(playbooks / "budget.yml"), "the disruption budget's test")
    cluster = require_valid(provisioned_sandbox.inventory)
    options = PlanOptions(stages=(stage,), batch_size="1", shard_by="count", shard_size=1,
                          max_parallel_shards=8)  # fmt: skip
    plan = make_plan(cluster, options, home=tmp_path / "state")
    [planned] = plan.stages
    compute = [shard for shard in planned.shards if not shard.controllers]
    assert len(planned.shards) == len(compute) + 1 >= 3  # the controllers', then one per node
    assert plan.disruption_budget("budget") == 1

    samples: list[set[str]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(maintenance_drains())
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    run_id = f"itest-budget-{time.time_ns()}"
    began = time.monotonic()
    sampler.start()
    try:
        with InventoryLock(plan.inventory_dir, run_id=run_id, home=tmp_path / "state") as held:
            result = execute(plan, lock=held, home=tmp_path / "state", run_id=run_id)
    finally:
        done.set()
        sampler.join(timeout=30)
        resume_ours(run_id)
    took = time.monotonic() - began
    summary = result.to_dict()
    assert summary["failed_hosts"] == [] and summary["stopped"] is None, summary
    [entry] = summary["stages"]
    shards = {shard["name"]: shard for shard in entry["shards"]}
    assert len(shards) == len(planned.shards)
    runs = sorted((shard["started"], shard["finished"]) for shard in entry["shards"]
                  if shard["name"] != "controllers")  # fmt: skip
    pairs = zip(runs, runs[1:], strict=False)
    assert all(a[0] <= b[1] and b[0] <= a[1] for a, b in pairs), runs  # run in parallel
    nodes = {node for shard in compute for node in shard.hosts}
    seen = set().union(*samples)
    assert seen == nodes, (seen, len(samples))  # every node was drained, and seen drained
    assert max(len(drained) for drained in samples) == 1, [s for s in samples if len(s) > 1]
    assert maintenance_drains() == set()  # all resumed by the run itself
    print(f"{len(planned.shards)} shards, {len(samples)} samples of sinfo, {took:.0f} s")
