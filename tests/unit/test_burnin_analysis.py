"""Judging: the synthetic 8-node H100 run, the recorded CPU run, floors, overrides, reasons.

The gpu8 inventory declares no InfiniBand rails, so its multi-node all-reduces are judged
against the fleet only; `gpu8_rails` is the same run on nodes that declare 8 NDR rails each,
where the ring across nodes has a floor of 8 x 400 Gb/s / 8 x 0.75 = 300 GB/s."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from captures import shared_capture
from kiln.burnin import judge_run
from kiln.inventory import require_valid
from kiln.inventory.schema import BurninSpec
from kiln.judging import Action, Severity
from kiln.judging.results import allreduce_from_nccl
from kiln.judging.thresholds import RAILS, floors_for
from kiln.parsers.nccl_tests import parse_text
from kiln.profiles import get_profile
from kiln.records.burnin import load_run

FIXTURES = Path(__file__).parents[1] / "fixtures"
GPU8 = FIXTURES / "burnin" / "gpu8"
CPU2 = FIXTURES / "burnin" / "cpu2"


@pytest.fixture(scope="module")
def gpu8():
    return judge_run(GPU8 / "run", require_valid(GPU8 / "inventory"))


@pytest.fixture(scope="module")
def gpu8_rails(tmp_path_factory):
    inventory = tmp_path_factory.mktemp("gpu8") / "inventory"
    shutil.copytree(GPU8 / "inventory", inventory)
    with (inventory / "group_vars" / "all.yml").open("a") as handle:
        handle.write(
            "kiln_ib:\n  link_rate_gbps: 400\n"
            "kiln_ib_hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7]\n"
        )
    return judge_run(GPU8 / "run", require_valid(inventory))


def failing(report, check):
    return {v.name for v in report.failures if v.check == check}


def test_each_injected_fault_is_found_by_name(gpu8):
    assert failing(gpu8, "gemm_floor") == {"gpu003", "gpu003/gpu5"}
    assert failing(gpu8, "checksum") == {"gpu006", "gpu006/gpu2"}
    assert failing(gpu8, "throttle") == {"gpu007", "gpu007/gpu1"}
    assert failing(gpu8, "node_vs_fleet") == {"gpu005"}
    assert failing(gpu8, "result") == {"gpu008"}
    assert failing(gpu8, "allreduce_node") == {"gpu004"}
    assert failing(gpu8, "allreduce_fabric") == set()  # no rails declared: the pairs judge
    assert failing(gpu8, "allreduce_pairs") == {"gpu002"}  # the bad node
    assert failing(gpu8, "allreduce_link") == {"gpu004<->gpu007"}  # the bad link
    assert "gpu001" not in gpu8.drain()


def test_severity_action_and_drain_reasons(gpu8):
    drain = gpu8.drain()
    assert sorted(drain) == ["gpu002", "gpu003", "gpu004", "gpu005", "gpu006", "gpu007", "gpu008"]
    assert drain["gpu003"] == "kiln: gemm gpu5 478 TFLOPS < floor 520 (+1 more)"
    assert drain["gpu006"] == "kiln: gemm gpu2 wrong results (silent data corruption)"
    assert drain["gpu008"] == "kiln: no result: job timed out or crashed"
    assert drain["gpu007"].startswith("kiln: gpu1 throttled: hw_thermal_slowdown")
    assert all(len(reason) < 100 for reason in drain.values())
    by_key = {(v.name, v.check): v for v in gpu8.verdicts}
    assert by_key[("gpu006/gpu2", "checksum")].severity is Severity.CRITICAL
    assert by_key[("gpu003/gpu5", "gemm_floor")].measured == 478.0
    assert by_key[("gpu003/gpu5", "gemm_floor")].threshold == 520.0
    assert by_key[("gpu004<->gpu007", "allreduce_link")].action is Action.INVESTIGATE
    assert by_key[("fabric-ring", "allreduce_fabric")].passed
    assert by_key[("gpu001", "gemm_floor")].passed
    assert [v.passed for v in gpu8.verdicts] == sorted(v.passed for v in gpu8.verdicts)


def test_one_verdict_per_node_and_check(gpu8):
    checks = {v.check for v in gpu8.verdicts if v.name == "gpu001"}
    assert checks == {
        "result",
        "gpu_count",
        "checksum",
        "gemm_floor",
        "gemm_vs_node_best",
        "throttle",
        "node_vs_fleet",
        "allreduce_node",
        "allreduce_pairs",
    }


def test_recorded_cpu_run_passes():
    report = judge_run(CPU2 / "run", require_valid(CPU2 / "inventory"))
    assert report.passed, [v.message for v in report.failures]
    assert set(report.gpu_tflops) == {"kiln-node01", "kiln-node02"}
    assert report.floors["none"].gemm_tflops == 0.0001
    assert {v.check for v in report.verdicts if v.name == "kiln-node01"} >= {"result", "gemm_floor"}


def test_missing_and_garbled_results_are_failures(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(CPU2 / "run", run)
    (run / "gemm" / "kiln-node01.json").unlink()
    (run / "allreduce" / "fabric-ring.json").write_text('{"kind": "allreduce", "ro')
    report = judge_run(run, require_valid(CPU2 / "inventory"))
    assert report.drain() == {"kiln-node01": "kiln: no result: job timed out or crashed"}
    [job] = [v for v in report.failures if v.subject == "job"]
    assert job.name == "allreduce/fabric-ring" and job.severity is Severity.CRITICAL


def test_floor_overrides_apply_only_when_set():
    profile = get_profile("none")
    assert floors_for(profile, BurninSpec()).gemm_relative_pct == 50  # the profile's own
    spec = BurninSpec(gemm_tflops_floor=0.5, gemm_relative_pct=20)
    floors = floors_for(profile, spec)
    assert (floors.gemm_tflops, floors.gemm_relative_pct, floors.node_relative_pct) == (0.5, 20, 50)
    assert set(floors.overridden) == {"gemm_tflops", "gemm_relative_pct"}


def test_inventory_override_fails_the_cpu_run(tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(CPU2 / "inventory", inventory)
    with (inventory / "group_vars" / "all.yml").open("a") as handle:
        handle.write("kiln_burnin:\n  gemm_tflops_floor: 1000\n")
    report = judge_run(CPU2 / "run", require_valid(inventory))
    assert failing(report, "gemm_floor") == {
        "kiln-node01",
        "kiln-node02",
        "kiln-node01/cpu0",
        "kiln-node02/cpu0",
    }


def test_load_run_keeps_the_manifest_order():
    run = load_run(GPU8 / "run")
    assert list(run.gemm) == [f"gpu{i:03d}" for i in range(1, 9)]
    assert len(run.allreduce) == 1 + 8 + 12 and not run.missing_jobs


def test_nccl_tests_output_becomes_an_allreduce_result():
    text = shared_capture(
        "nccl-tests-all_reduce_perf/a100_sxm4_40gb_8gpu_single_node_superbench.txt"
    ).read_text()
    result = allreduce_from_nccl("nccl-node", parse_text(text))
    assert result.implementation == "nccl-tests" and result.scope == "node" and result.correct
    assert result.wrong == 0  # validation was off (-c 0): N/A columns count as 0
    assert result.verdict_bytes == max(r.bytes for r in result.rows)
    assert result.verdict_busbw_gbs > 100  # an 8-GPU NVLink node


def test_report_round_trips_through_json(gpu8):
    from kiln.judging.model import BurninReport

    again = BurninReport.from_dict(json.loads(json.dumps(gpu8.to_dict())))
    assert again.to_dict() == gpu8.to_dict()


def test_each_verdict_names_the_rule_that_judged_it(gpu8, gpu8_rails):
    rules = {(v.name, v.check): v.rule for v in gpu8.verdicts if v.check.startswith("allreduce")}
    assert rules[("gpu004", "allreduce_node")] == "intra-node floor"
    assert rules[("fabric-ring", "allreduce_fabric")] == "fleet-relative"
    assert rules[("gpu002", "allreduce_pairs")] == "fleet-relative"
    assert gpu8.pair_threshold_gbs == pytest.approx(0.9 * (388.8 + 389.48) / 2)
    rails = {(v.name, v.check): v for v in gpu8_rails.verdicts}
    fabric = rails[("fabric-ring", "allreduce_fabric")]
    assert (fabric.passed, fabric.threshold, fabric.rule) == (False, 300, RAILS)
    assert fabric.action is Action.INVESTIGATE
    assert "211 GB/s at 1 GiB < 300 (8 x 400 Gb/s x 0.75)" in fabric.message
    # The pairs' median (389 GB/s, -10 %) is above the rails' floor: the fleet binds there.
    assert rails[("gpu002", "allreduce_pairs")].rule == "fleet-relative"
    assert failing(gpu8_rails, "allreduce_pairs") == {"gpu002"}
    assert failing(gpu8_rails, "allreduce_link") == {"gpu004<->gpu007"}
    assert not [v for v in gpu8_rails.failures if v.check.startswith("ib_")]  # IB not measured


def test_the_fabric_efficiency_is_overridable(tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(GPU8 / "inventory", inventory)
    with (inventory / "group_vars" / "all.yml").open("a") as handle:
        handle.write(
            "kiln_ib:\n  link_rate_gbps: 400\nkiln_ib_hcas: [a, b, c, d, e, f, g, h]\n"
            "kiln_burnin:\n  allreduce_fabric_efficiency: 0.5\n"
        )
    report = judge_run(GPU8 / "run", require_valid(inventory))
    fabric = next(v for v in report.verdicts if v.check == "allreduce_fabric")
    assert fabric.passed and fabric.threshold == 200  # 8 x 400 / 8 x 0.5; the ring did 211
    assert report.floors["h100-sxm"].overridden == ("allreduce_fabric_efficiency",)
