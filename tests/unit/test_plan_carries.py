"""The plan carries what execution needs: each shard's batch count, how many shards run at once
and the inventory exports' text, so kiln.runner reads them and never works them out itself; the
lock is its caller's."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from test_runner import SMOKE, plan_options
from test_shards import RACKS, fleet

from kiln.inventory.export import render_inventory
from kiln.plan import make_plan
from kiln.plan.model import RUN_INVENTORY
from kiln.plan.stages import Stage

STAGE = Stage("base", str(SMOKE), "")
RUNNER = Path(__file__).resolve().parents[2] / "cli" / "kiln" / "runner"


def test_each_shard_carries_the_batches_its_hosts_make(tmp_path):
    cluster = fleet(tmp_path, shard_by="rack_group", shard_size=4, batch_size="1")
    plan = make_plan(cluster, plan_options([STAGE]), tmp_path / "state")
    stage = plan.stages[0]
    assert [(s.name, len(s.hosts), s.batches) for s in stage.shards] == [
        ("controllers", 1, 1),
        ("racks-ra-rb", 4, 4),  # batch_size 1: one batch a host
        ("rack-rc", 2, 2),
    ]
    # with a percentage, each shard's own hosts decide (Ansible's serial inside each process)
    halves = make_plan(cluster, plan_options([STAGE], batch_size="50%"), tmp_path / "state")
    assert [s.batches for s in halves.stages[0].shards] == [1, 2, 2]


def test_hosts_held_back_narrow_the_shards_and_their_batches(tmp_path):
    cluster = fleet(tmp_path, batch_size="1")
    plan = make_plan(cluster, plan_options([STAGE]), tmp_path / "state")
    stage = plan.stages[0]
    assert plan.shards_left(stage, stage.hosts) is stage.shards  # nothing held back
    left = [h for h in stage.hosts if h not in {"a1", "b1", "b2"}]
    assert [(s.name, s.hosts, s.batches) for s in plan.shards_left(stage, left)] == [
        ("controllers", ("ctl",), 1),
        ("rack-ra", ("a2",), 1),  # rack-rb lost every host: no shard at all
        ("rack-rc", ("c1", "c2"), 2),
    ]


def test_the_plan_sizes_parallelism_per_stage(tmp_path):
    cluster = fleet(tmp_path, max_parallel_shards=2)
    plan = make_plan(cluster, plan_options([STAGE]), tmp_path / "state")
    assert plan.stages[0].parallel == 2
    # never more than the stage's compute shards (three racks)
    wide = fleet(tmp_path, max_parallel_shards=16)
    assert make_plan(wide, plan_options([STAGE]), tmp_path / "state").stages[0].parallel == 3


def test_exports_hold_their_hosts_and_render_once(tmp_path):
    cluster = fleet(tmp_path)
    plan = make_plan(cluster, plan_options([STAGE]), tmp_path / "state")
    assert set(plan.exports) == {RUN_INVENTORY, "controllers", "rack-ra", "rack-rb", "rack-rc"}
    assert plan.exports[RUN_INVENTORY].hosts == ("ctl", *RACKS)
    assert plan.exports["rack-rb"].hosts == ("ctl", "b1", "b2")  # plus the controllers
    export = plan.exports["rack-rb"]
    assert export.text == render_inventory(cluster, ["ctl", "b1", "b2"])
    assert export.text is export.text  # rendered on first read, then kept
    assert set(json.loads(export.text)["all"]["hosts"]) == {"ctl", "b1", "b2"}


def test_the_runner_works_out_none_of_it_itself():
    """No batch arithmetic, no parallelism sizing, no rendering and no lock of its own in
    kiln.runner (its caller hands it the lock it holds)."""
    banned = {
        ("kiln.inventory.batches", "*"),
        ("kiln.inventory.export", "*"),
        ("kiln.plan.shards", "parallel_limit"),
        ("kiln.records.lock", "InventoryLock"),
    }
    found = []
    for path in sorted(RUNNER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if {(node.module, "*"), (node.module, alias.name)} & banned:
                        found.append(f"{path.name}: {node.module}.{alias.name}")
    assert found == []
