"""kiln plan: which changes each stage rolls, and how its batches go (kiln.plan.rolling)."""

import json
from pathlib import Path

import pytest

from kiln.app import main
from kiln.examples import write_example
from kiln.gpu.filters import nccl_check_failures
from kiln.inventory import require_valid
from kiln.plan import PlanOptions, make_plan
from kiln.plan.rolling import DEFAULT_DRAIN_TIMEOUT_S, DISRUPTIVE
from kiln.plan.stages import STAGES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example-h100"
REAL_RUN = ROOT / "tests/fixtures/real/nccl-tests-all_reduce_perf"


def run(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


def test_every_disruptive_stage_is_a_stage():
    assert set(DISRUPTIVE) <= {stage.name for stage in STAGES}
    assert set(DISRUPTIVE) == {"nvidia", "infiniband", "nccl"}


def test_plan_json_says_what_each_stage_rolls_and_how(tmp_path, capsys):
    code, out, _ = run(["plan", str(EXAMPLE), "--json", "--batch-size", "25%"], capsys)
    assert code == 0
    stages = {stage["name"]: stage for stage in json.loads(out)["stages"]}
    # 128 GPU nodes in batches of 32 (25%); the example's kiln_rollout stops at 5%.
    assert stages["nvidia"]["rolling"] == {
        "disruptive": ["driver branch or version", "fabric manager with the driver"],
        "reboot": ["driver branch or version", "fabric manager with the driver"],
        "batch_size": "25%",
        "batches": 4,
        "largest_batch": 32,
        "shards": 1,
        "disruption_budget": 32,
        "max_fail_percentage": 5,
        "drain_timeout_s": DEFAULT_DRAIN_TIMEOUT_S,
        "drain_timeout_var": "nvidia_driver_drain_timeout_s",
    }
    assert stages["nccl"]["rolling"]["disruptive"] == ["NCCL version"]
    assert stages["nccl"]["rolling"]["reboot"] == []
    # The infiniband stage runs on the controller too: 129 hosts, 25% -> batches of 32.
    assert stages["infiniband"]["rolling"]["batches"] == 5
    assert stages["infiniband"]["rolling"]["disruptive"] == [
        "DOCA-OFED version (its rdma-core with it)"
    ]
    for name in ("preflight", "base", "slurm", "power"):
        assert stages[name]["rolling"] is None


def test_the_job_wait_shown_is_the_longest_the_inventory_sets(tmp_path):
    write_example(tmp_path, 8)
    with (tmp_path / "group_vars" / "kiln_compute.yml").open("a") as group_vars:
        group_vars.write("nccl_drain_timeout_s: 600\n")
    host_vars = tmp_path / "host_vars"
    host_vars.mkdir()
    (host_vars / "gpu003.yml").write_text("---\nnccl_drain_timeout_s: 7200\n")
    plan = make_plan(require_valid(tmp_path), PlanOptions(batch_size="2"), home=tmp_path / "s")
    nccl = next(stage for stage in plan.stages if stage.name == "nccl")
    rolling = plan.rolling(nccl)
    assert rolling is not None
    assert (rolling.batches, rolling.largest_batch, rolling.drain_timeout_s) == (4, 2, 7200)
    nvidia = plan.rolling(next(stage for stage in plan.stages if stage.name == "nvidia"))
    assert nvidia is not None and nvidia.drain_timeout_s == DEFAULT_DRAIN_TIMEOUT_S


def test_plan_table_shows_the_rolling_changes(capsys):
    code, out, _ = run(["plan", str(EXAMPLE), "--batch-size", "32"], capsys)
    assert code == 0
    text = " ".join(out.split())
    assert "Disruptive changes, rolled batch by batch (docs/operations.md):" in text
    assert (
        "nvidia: driver branch or version (reboot), fabric manager with the driver "
        "(reboot); 4 batch(es) of up to 32 in 1 shard(s); at most 32 node(s) out of service "
        "at once over all shards; stops when more than 5% of a batch fails; waits up to 3600 s "
        "for jobs"
    ) in text
    assert "nccl: NCCL version; 4 batch(es)" in text


# --- the nccl role's check after a change (kiln_nccl_check_failures) ---------------------------


def test_a_real_single_node_run_passes_the_check():
    text = (REAL_RUN / "h100_80gb_8gpu_single_node_nvls_issue290.txt").read_text()
    assert nccl_check_failures(text, 8) == []


def test_the_check_names_missing_gpus_wrong_values_and_unreadable_output():
    text = (REAL_RUN / "h100_80gb_8gpu_single_node_nvls_issue290.txt").read_text()
    # derived from the real run: values out of bounds, as nccl-tests reports a failed check
    bad = text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 4 FAILED")
    assert nccl_check_failures(bad, 8) == ["4 out-of-bounds value(s)"]
    assert nccl_check_failures(text, 4) == ["all_reduce_perf used 8 GPU(s), the node declares 4"]
    problems = nccl_check_failures("NCCL WARN Cuda failure 'out of memory'\n", 8)
    assert len(problems) == 1 and problems[0].startswith("all_reduce_perf printed no result")
