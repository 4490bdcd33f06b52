"""Time to cluster (`kiln plan --estimate`, issue 34): the projection re-derived by hand from a
run record's measured stage costs and a burn-in's timings, the bottleneck named, and the
command over a record in a runs home."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kiln.app import app
from kiln.errors import InvalidInputError
from kiln.judging.locate import MAX_ROUNDS
from kiln.judging.pairs import default_rounds
from kiln.plan.estimate import (
    BURNIN,
    CONTROLLER_CPU,
    MIRROR,
    ROLLING_BATCHES,
    MeasuredBurnin,
    Target,
    estimate,
    measured_burnin,
    measured_stages,
)
from kiln.plan.shards import parallel_limit
from kiln.records.burnin import write_timings

ROOT = Path(__file__).resolve().parents[2]


def _shard(name: str, hosts: int, start: str, end: str, batches: int) -> dict:
    return {"name": name, "hosts": [f"{name}-{i}" for i in range(hosts)], "status": "successful",
            "started": f"2026-12-03T10:{start}+00:00", "finished": f"2026-12-03T10:{end}+00:00",
            "expected_batches": batches}  # fmt: skip


def summary(inventory: str = "/inv") -> dict:
    """A rehearsal of 32 nodes in 4 shards of 8 (batches of 4), as summary.json holds it."""
    hosts = {f"n{i:02d}": {"status": "ok"} for i in range(1, 33)}
    return {
        "inventory": inventory,
        "check": False,
        "stages": [
            {"name": "base", "status": "successful", "hosts": {**hosts, "ctl": {}},
             "seconds": 240.0, "controller_cpu_s": 99.0,
             "shards": [_shard("controllers", 1, "00:00", "00:30", 1),
                        _shard("part-001", 8, "00:30", "01:50", 2),  # 40 s a batch
                        _shard("part-002", 8, "00:30", "01:30", 2),  # 30 s
                        _shard("part-003", 8, "01:30", "03:10", 2),  # 50 s
                        _shard("part-004", 8, "01:50", "03:10", 2)]},  # 40 s
            {"name": "slurm", "status": "successful", "hosts": hosts,
             "seconds": 400.0, "controller_cpu_s": 640.0,
             "shards": [_shard("part-001", 8, "04:00", "06:00", 2)]},  # 60 s a batch
            {"name": "power", "status": "skipped", "hosts": {}},
            {"name": "nccl", "status": "successful", "hosts": hosts},  # an older kiln's: no cost
        ],
    }  # fmt: skip


def test_the_stages_measured_cost_and_one_batchs_time():
    base, slurm = measured_stages(summary())
    assert (base.name, base.hosts, base.seconds, base.controller_cpu_s) == ("base", 33, 240, 99)
    assert base.batch_seconds == 40.0  # the median of 40, 30, 50, 40 (controllers left out)
    assert base.batch_hosts == 4.0 and base.cpu_per_host == 3.0
    assert (slurm.batch_seconds, slurm.cpu_per_host) == (60.0, 20.0)


def test_the_projection_re_derived_by_hand():
    stages = measured_stages(summary())
    burnin = MeasuredBurnin(nodes=32, jobs_seconds=60.0, pair_rounds=5, pairs_seconds=100.0)
    target = Target(nodes=12_500, cpus=64, memory_gib=2.0, forks=25, shard_size=8, batch_size=4,
                    mirror_gbps=10.0, node_download_gib=4.0)  # fmt: skip
    result = estimate(stages, target, burnin)
    shards = math.ceil(12_500 / 8)  # 1,563
    parallel = parallel_limit(0, shards, 64, forks=25, memory_gib=2.0)
    assert parallel == 4  # (2,048 - 128) MiB // (90 + 25 x 15) MiB
    rounds = math.ceil(shards / parallel) * 2  # 391 rounds of 2 batches
    base, slurm = result.stages
    assert base.cpu_seconds == pytest.approx(12_500 * 3.0 / 64)
    assert base.seconds == pytest.approx(rounds * 40.0) and base.bound == ROLLING_BATCHES
    assert slurm.cpu_seconds == pytest.approx(12_500 * 20.0 / 64)
    assert slurm.seconds == pytest.approx(rounds * 60.0) and slurm.bound == ROLLING_BATCHES
    assert result.mirror_seconds == pytest.approx(12_500 * 4.0 * 8 / 10.0)
    assert result.provision_seconds == pytest.approx(rounds * 100.0)
    # the pairwise pass: the Locator's three rounds at most, not log2(12,500) = 14 of them
    assert default_rounds(12_500) == 14 and MAX_ROUNDS == 3
    assert result.burnin_seconds == pytest.approx(60.0 + 3 * 20.0)
    assert result.bottleneck == ROLLING_BATCHES
    document = result.to_dict()
    assert document["bottleneck"] == ROLLING_BATCHES and document["nodes"] == 12_500
    assert [s["rounds"] for s in document["stages"]] == [rounds, rounds]


def test_worker_controllers_share_the_shards_and_their_cpu():
    """16 workers of 8 cores each (kiln_workers, or --workers): four times the shards at once
    per 4 workers, and the CPU bound split over every worker's cores."""
    stages = measured_stages(summary())
    one = Target(nodes=12_500, cpus=8, memory_gib=2.0, forks=25, shard_size=8, batch_size=4)
    many = Target(nodes=12_500, cpus=8, memory_gib=2.0, forks=25, shard_size=8, batch_size=4,
                  machines=16)  # fmt: skip
    alone, spread = estimate(stages, one), estimate(stages, many)
    shards = math.ceil(12_500 / 8)
    assert alone.stages[0].parallel == 4 and spread.stages[0].parallel == 4 * 16
    assert spread.stages[0].rounds == math.ceil(shards / 64) * 2
    assert spread.stages[1].cpu_seconds == pytest.approx(12_500 * 20.0 / (8 * 16))
    assert alone.stages[1].cpu_seconds == pytest.approx(12_500 * 20.0 / 8)
    assert spread.total_seconds < alone.total_seconds / 10
    assert spread.to_dict()["controller"]["machines"] == 16


def test_each_bound_is_named_where_it_costs_most():
    stages = measured_stages(summary())
    one_core = Target(nodes=12_500, cpus=1, memory_gib=64.0, forks=25, shard_size=512,
                      batch_size=512)  # fmt: skip
    result = estimate(stages, one_core)
    assert {s.bound for s in result.stages} == {CONTROLLER_CPU}
    assert result.bottleneck == CONTROLLER_CPU
    assert any("mirror bandwidth not assessed" in note for note in result.notes)
    assert any("burn-in not assessed" in note for note in result.notes)
    slow_mirror = Target(nodes=100, cpus=64, memory_gib=64.0, forks=25, shard_size=512,
                         batch_size=512, mirror_gbps=0.01, node_download_gib=10.0)  # fmt: skip
    assert estimate(stages, slow_mirror).bottleneck == MIRROR
    long_burnin = MeasuredBurnin(nodes=32, jobs_seconds=86_400.0, pair_rounds=0,
                                 pairs_seconds=0.0)  # fmt: skip
    small = Target(nodes=32, cpus=64, memory_gib=64.0, forks=25, shard_size=8, batch_size=4)
    assert estimate(stages, small, long_burnin).bottleneck == BURNIN


def test_a_batch_larger_than_the_forks_takes_more_waves():
    stages = measured_stages(summary())[:1]  # measured: batches of 4 hosts, 40 s
    wide = Target(nodes=512, cpus=512, memory_gib=512.0, forks=25, shard_size=512, batch_size=100)
    (base,) = estimate(stages, wide).stages
    assert base.rounds == 6 and base.seconds == pytest.approx(6 * 40.0 * 4)  # 100 hosts: 4 waves


def test_an_older_record_and_a_broken_timings_file_are_said_plainly():
    older = {"stages": [{"name": "base", "status": "successful", "hosts": {"a": {}}}]}
    assert measured_stages(older) == []
    with pytest.raises(InvalidInputError, match="no stage with its measured cost"):
        estimate([], Target(1, 1, 1.0, 1, 1, 1))
    assert measured_burnin({"nodes": 2}) is None
    assert measured_burnin({"nodes": 2, "seconds": {"jobs": 5.5}}) == MeasuredBurnin(2, 5.5, 0, 0)


def test_a_burn_in_record_keeps_its_timings(tmp_path):
    path = write_timings(tmp_path, 32, {"total": 300.0, "jobs": 60.25, "pairs": 100.0}, 5)
    assert path == tmp_path / "timings.json"
    read = measured_burnin(json.loads(path.read_text()))
    assert read == MeasuredBurnin(nodes=32, jobs_seconds=60.25, pair_rounds=5, pairs_seconds=100.0)


def test_kiln_plan_estimate_reads_the_runs_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    inventory = ROOT / "inventories" / "example-h100"
    run = tmp_path / "home" / "runs" / "20261203T100000Z-abcdef"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary(str(inventory.resolve()))))
    shown = CliRunner().invoke(app, ["plan", str(inventory), "--estimate", "--json",
                                     "--controller-cpus", "64"])  # fmt: skip
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.output)
    assert document["kiln"] == "plan-estimate"
    assert document["measured"]["run"] == str(run)
    assert [e["nodes"] for e in document["estimates"]][-1] == 12_500
    assert all(e["controller"]["cpus"] == 64 for e in document["estimates"])
    assert all(e["controller"]["machines"] == 1 for e in document["estimates"])  # no kiln_workers
    text = CliRunner().invoke(app, ["plan", str(inventory), "--estimate", "--workers", "16"],
                              terminal_width=200)  # fmt: skip
    assert text.exit_code == 0, text.output
    assert "Time to cluster, projected" in text.output and "bottleneck" in text.output
    assert "Shards on 16 worker controllers" in text.output
    empty = CliRunner().invoke(app, ["plan", str(ROOT / "inventories" / "sandbox"), "--estimate"])
    assert isinstance(empty.exception, InvalidInputError)  # exit 2 through kiln's entry point
    assert "carries its measured cost" in empty.exception.message
