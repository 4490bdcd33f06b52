"""kiln.judging.rules_dcgm: `dcgmi diag` judged per node against recorded real outputs.

Skip is never Pass: a required hardware test that was skipped leaves the node not validated,
naming the tests; a Fail fails the node naming the test and dcgmi's message; Pass passes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.judging.rules_dcgm import (
    ABSENT,
    NO_ANSWER,
    RAN,
    REQUIRED,
    DcgmRun,
    judge_dcgm,
    level_for,
)
from kiln.judging.verdicts import Action, Severity

FIXTURES = Path(__file__).parents[1] / "fixtures"
REAL = FIXTURES / "real" / "dcgmi-diag"
DERIVED = FIXTURES / "derived" / "dcgmi-diag"
BLACKWELL = "rtxpro6000_blackwell_x2_r3_hardware_all_skip_dcgm339"


def _run(name: str, level: int, folder: Path = REAL, **kw) -> DcgmRun:
    return DcgmRun("gpu001", level, RAN, output=(folder / name).read_text(), exit_code=0, **kw)


def test_levels_by_suite() -> None:
    assert [level_for(s) for s in ("quick", "standard", "soak")] == [1, 2, 3]
    assert REQUIRED[1] == ("software",) and set(REQUIRED[2]) < set(REQUIRED[3])


@pytest.mark.parametrize(
    "folder, name", [(REAL, f"{BLACKWELL}.txt"), (DERIVED, f"{BLACKWELL}.json")]
)
def test_hardware_tests_all_skipped_leave_the_node_not_validated(folder: Path, name: str) -> None:
    """The real DCGM 3.3.9 run on two Blackwell GPUs (table, and as its -j document)."""
    [verdict] = judge_dcgm(_run(name, 3, folder))
    assert not verdict.passed
    assert (verdict.subject, verdict.name, verdict.check) == ("node", "gpu001", "dcgm")
    assert (verdict.severity, verdict.action) == (Severity.WARNING, Action.INVESTIGATE)
    assert verdict.message.startswith(
        "not validated: dcgm r3 skipped PCIe, GPU Memory, Targeted Stress, Targeted Power, "
        "Memory Bandwidth; did not run diagnostic (required at level 3:"
    )
    assert "EUD" not in verdict.message  # optional: never required


def test_the_same_output_at_level_1_passes_its_deployment_tests() -> None:
    [verdict] = judge_dcgm(_run(f"{BLACKWELL}.txt", 1))
    assert verdict.passed
    assert verdict.message.startswith("dcgm r1: 15 test(s) passed; optional PCIe, GPU Memory")


def test_a_healthy_level_3_run_passes_with_its_optional_skip_named() -> None:
    [verdict] = judge_dcgm(_run("v100_pcie_r3_verbose_pass_eud_skip_dcgm339.txt", 3))
    assert verdict.passed and verdict.action is Action.NONE
    assert verdict.message == "dcgm r3: 16 test(s) passed; optional EUD Test not run"


def test_a_failed_test_drains_the_node_naming_the_test_and_dcgmis_message() -> None:
    [verdict] = judge_dcgm(
        _run("h100x8_r3_fail_cuinit_no_fabricmanager_dcgm338.txt", 3, shared_capture("dcgmi-diag"))
    )
    assert not verdict.passed
    assert (verdict.severity, verdict.action) == (Severity.CRITICAL, Action.DRAIN)
    assert verdict.message.startswith(
        "dcgm r3 GPU Memory failed on all GPUs: GPU 0 Error using CUDA API cuInit"
    )
    assert verdict.reason.startswith("kiln: dcgm r3 GPU Memory failed on all GPUs: GPU 0 Error")
    assert len(verdict.reason) <= 99


@pytest.mark.parametrize(
    "name", ["l40s_x4_r2_pcie_internal_error_dcgm423.txt",
             "b200_x8_r2_pcie_internal_error_slurm_dcgm441.txt"],
)  # fmt: skip
def test_a_test_dcgm_errored_on_with_every_gpu_passing_is_not_validated_not_drained(name) -> None:
    """pcie Fail with "There was an internal error during the test" while every GPU line says
    Pass: DCGM could not run the test. No GPU is blamed, and the node is not a pass either."""
    [verdict] = judge_dcgm(_run(name, 2))
    assert not verdict.passed
    assert (verdict.severity, verdict.action) == (Severity.WARNING, Action.INVESTIGATE)
    assert verdict.message.startswith(
        "not validated: dcgm r2 pcie errored with no GPU failing: There was an internal error "
        "during the test: '"
    )


def test_one_gpu_failing_on_a_continuation_row_drains_and_names_that_gpu() -> None:
    """Real DCGM 3.3.9: "Targeted Power | Pass - GPUs: 0, 2, 3" then "| Fail - GPU: 1"."""
    node, gpu = judge_dcgm(_run("a10g_x4_r3_targeted_power_fail_gpu1_dcgm339.txt", 3))
    assert (node.passed, node.severity, node.action) == (False, Severity.CRITICAL, Action.DRAIN)
    assert node.message.startswith(
        "dcgm r3 Targeted Power failed on GPU 1: GPU 1 Max power of 224.1 did not reach"
    )
    assert (gpu.name, gpu.passed, gpu.action) == ("gpu001/gpu1", False, Action.DRAIN)
    assert gpu.message == "dcgm r3 Targeted Power failed on GPU 1"


def test_a_dcgm_4_gpu_line_that_fails_is_that_gpus_failure() -> None:
    """Built from the real L40S output: pcie's "GPU2: Pass" edited to "GPU2: Fail" (the
    DCGM 4 shape of one GPU failing), so the failure is GPU 2's and the node drains."""
    text = (REAL / "l40s_x4_r2_pcie_internal_error_dcgm423.txt").read_text()
    head, pcie = text.split("| pcie ", 1)
    edited = head + "| pcie " + pcie.replace("GPU2: Pass", "GPU2: Fail")
    node, gpu = judge_dcgm(DcgmRun("gpu001", 2, RAN, output=edited, exit_code=0))
    assert node.action is Action.DRAIN and node.message.startswith("dcgm r2 pcie failed on GPU 2")
    assert (gpu.name, gpu.message) == ("gpu001/gpu2", "dcgm r2 pcie failed on GPU 2")


def test_a_failing_gpu_of_a_json_run_gets_its_own_verdict() -> None:
    node, gpu = judge_dcgm(_run("gb10_r1_json_software_fail_dcgm423.json", 1))
    assert node.message.startswith(
        "dcgm r1 software failed on GPU 0: Persistence Mode: Persistence mode for GPU 0 is"
    )
    assert (gpu.subject, gpu.name, gpu.node, gpu.passed) == ("gpu", "gpu001/gpu0", "gpu001", False)
    assert gpu.message == "dcgm r1 software failed on GPU 0"


def test_a_level_2_output_judged_at_level_3_did_not_run_the_stress_tests() -> None:
    text = (REAL / "v100_pcie_r3_verbose_pass_eud_skip_dcgm339.txt").read_text()
    level2 = "\n".join(
        line for line in text.splitlines()
        if not line.startswith(("| Diagnostic      ", "| Targeted", "| Memory Bandwidth"))
    )  # fmt: skip
    [verdict] = judge_dcgm(DcgmRun("gpu001", 3, RAN, output=level2))
    assert not verdict.passed and verdict.message.startswith(
        "not validated: dcgm r3 did not run diagnostic, targeted_stress, targeted_power, "
        "memory_bandwidth"
    )


def test_a_gpu_node_without_dcgmi_is_not_validated_never_passed() -> None:
    """Not run is never passed: the phase only runs on GPU nodes, so no dcgmi is no proof."""
    [verdict] = judge_dcgm(DcgmRun("gpu001", 3, ABSENT))
    assert not verdict.passed
    assert (verdict.severity, verdict.action) == (Severity.WARNING, Action.INVESTIGATE)
    assert verdict.message == (
        "not validated: dcgm r3 could not run: dcgmi is not installed on this GPU node "
        "(the nvidia_dcgm role)"
    )


def test_a_host_engine_that_does_not_answer_leaves_the_node_not_validated() -> None:
    """The real lines dcgmi prints when nv-hostengine is not running (SOURCE.txt)."""
    said = (REAL / "no_hostengine_connection_refused_dcgm.txt").read_text()
    for run in (DcgmRun("gpu001", 1, RAN, output=said, exit_code=255),
                DcgmRun("gpu001", 1, RAN, output="", error=said, exit_code=255)):  # fmt: skip
        [verdict] = judge_dcgm(run)
        assert not verdict.passed and verdict.action is Action.INVESTIGATE
        assert verdict.message == (
            "not validated: dcgm r1 could not run: nv-hostengine does not answer (exit 255; "
            "Error: unable to establish a connection to the specified host: localhost): "
            "start nvidia-dcgm"
        )


def test_a_passing_table_from_a_dcgmi_that_exited_non_zero_is_not_validated() -> None:
    healthy = (REAL / "v100_pcie_r3_verbose_pass_eud_skip_dcgm339.txt").read_text()
    [verdict] = judge_dcgm(DcgmRun("gpu001", 3, RAN, output=healthy, exit_code=124,
                                   error="terminated"))  # fmt: skip
    assert not verdict.passed
    assert verdict.message == (
        "not validated: dcgm r3 could not run: dcgmi exited 124 with no test failed (terminated)"
    )


def test_no_answer_or_an_unreadable_one_is_never_a_pass() -> None:
    [silent] = judge_dcgm(DcgmRun("gpu001", 2, NO_ANSWER, error="timeout: after 1980 s"))
    assert not silent.passed and silent.action is Action.INVESTIGATE
    assert silent.message == "not validated: dcgm r2 did not run: timeout: after 1980 s"
    # the real -j document cut short (dcgmi killed mid-write): unreadable, never a pass
    document = (REAL / "gb10_r1_json_software_fail_dcgm423.json").read_text()
    [verdict] = judge_dcgm(DcgmRun("gpu001", 1, RAN, exit_code=137, output=document[:400]))
    assert not verdict.passed and verdict.action is Action.INVESTIGATE
    assert verdict.message.startswith(
        "not validated: dcgm r1 printed no readable result (exit 137;"
    )


def test_a_run_record_round_trips() -> None:
    run = _run("gb10_r1_json_software_fail_dcgm423.json", 1, host="spark-1")
    assert DcgmRun.from_dict(run.to_dict()) == run
