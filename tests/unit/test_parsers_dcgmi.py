"""dcgmi diag -r 3 against a recorded real failure (8x H100, fabric manager not running)."""

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.parsers import ParseError
from kiln.parsers.dcgmi import parse_diag

REAL = Path(__file__).parent.parent / "fixtures/real/dcgmi-diag"
FAIL = shared_capture("dcgmi-diag/h100x8_r3_fail_cuinit_no_fabricmanager_dcgm338.txt")


def test_metadata_and_results() -> None:
    report = parse_diag(FAIL.read_text())
    assert report.metadata["DCGM Version"] == "3.3.8"
    assert report.metadata["Driver Version Detected"] == "560.35.03"
    assert report.metadata["GPU Device IDs Detected"].split(",") == ["2330"] * 8
    assert [(t.name, t.result) for t in report.tests] == [
        ("Denylist", "Pass"),
        ("NVML Library", "Pass"),
        ("CUDA Main Library", "Pass"),
        ("Permissions and OS Blocks", "Pass"),
        ("Persistence Mode", "Pass"),
        ("Environment Variables", "Pass"),
        ("Page Retirement/Row Remap", "Pass"),
        ("Graphics Processes", "Pass"),
        ("Inforom", "Pass"),
        ("PCIe", "Skip"),
        ("GPU Memory", "Fail"),
        ("Memory Bandwidth", "Skip"),
        ("EUD Test", "Skip"),
    ]
    assert report.test("PCIe").section == "Integration"
    assert report.test("EUD Test").section == "Stress"
    assert not report.passed


def test_failed_test_and_its_message() -> None:
    report = parse_diag(FAIL.read_text())
    [failed] = report.failed
    assert (failed.name, failed.section, failed.scope, failed.gpus) == (
        "GPU Memory",
        "Hardware",
        "All",
        None,
    )
    assert [n.kind for n in failed.notes] == ["Warning"] * 8
    assert [n.gpu for n in failed.notes] == list(range(8))
    # wrapped mid-word by dcgmi; joined back exactly
    assert failed.notes[0].text == (
        "GPU 0 Error using CUDA API cuInit Check DCGM and system logs for errors. Reset GPU. "
        "Restart DCGM. Rerun diagnostics. Unable to initialize CUDA library: 'system not yet "
        "initialized'. . Please check if a CUDA sample program can be run successfully on this "
        "host. Refer to https://github.com/nvidia/cuda-samples"
    )
    assert "'system not yet initialized'" in failed.message


def test_info_note_attached_to_passing_test() -> None:
    test = parse_diag(FAIL.read_text()).test("Persistence Mode")
    assert test.result == "Pass"
    [note] = test.notes
    assert note.kind == "Info"
    assert note.text.startswith(
        'Persistence mode for GPU 0 is disabled. Enable persistence mode by running "nvidia-smi'
    )
    assert note.text.endswith("Persistence mode for GPU 4 is disabled. Enable pers")


def test_malformed_row_is_named() -> None:
    lines = FAIL.read_text().splitlines()
    assert lines[33].startswith("| GPU Memory")
    lines[33] = "| GPU Memory                  Fail - All"
    with pytest.raises(ParseError) as info:
        parse_diag("\n".join(lines))
    assert info.value.tool == "dcgmi diag"
    assert info.value.line_no == 34


def test_result_without_status() -> None:
    text = FAIL.read_text().replace("| Fail - All      ", "| Broken - All    ", 1)
    with pytest.raises(ParseError, match="'GPU Memory' has no Pass/Fail/Skip/Warn"):
        parse_diag(text)


def test_no_table() -> None:
    with pytest.raises(ParseError, match="no result table"):
        parse_diag("Error: unable to establish a connection to the specified host: localhost\n")


# -- DCGM 3.3.9 on Blackwell: every hardware test "Skip" (the output kiln used to pass) ----------
BLACKWELL = REAL / "rtxpro6000_blackwell_x2_r3_hardware_all_skip_dcgm339.txt"
DERIVED = Path(__file__).parent.parent / "fixtures/derived/dcgmi-diag"


def test_a_run_whose_hardware_tests_were_all_skipped_is_not_passed() -> None:
    report = parse_diag(BLACKWELL.read_text())
    assert report.version == "3.3.9"
    assert report.metadata["GPU Device IDs Detected"] == "2bb5,2bb5"
    hardware = [t for t in report.tests if t.key != "software"]
    assert [(t.key, t.result, t.scope) for t in hardware] == [
        ("pcie", "Skip", "All"),
        ("memory", "Skip", "All"),
        ("targeted_stress", "Skip", "All"),
        ("targeted_power", "Skip", "All"),
        ("memory_bandwidth", "Skip", "All"),
        ("eud", "Skip", "All"),
    ]
    assert report.failed == []
    assert not report.passed  # Skip is never Pass


def test_a_healthy_level_3_run_reads_every_test_and_its_info() -> None:
    report = parse_diag((REAL / "v100_pcie_r3_verbose_pass_eud_skip_dcgm339.txt").read_text())
    assert [t.key for t in report.tests if t.key != "software"] == [
        "pcie", "memory", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth",
        "eud",
    ]  # fmt: skip
    power = report.test("Targeted Power")
    assert (power.result, power.notes[0].kind) == ("Pass", "Info")
    assert power.notes[0].text == "GPU 0 GPU 0 max power: 251.0 W average power usage: 247.8 W"
    assert report.test("EUD Test").result == "Skip"


@pytest.mark.parametrize(
    "name, version, gpus",
    [
        ("l40s_x4_r2_pcie_internal_error_dcgm423.txt", "4.2.3", 4),
        ("b200_x8_r2_pcie_internal_error_slurm_dcgm441.txt", "4.4.1", 8),
    ],
)
def test_dcgm_4_tables_give_a_result_per_gpu(name: str, version: str, gpus: int) -> None:
    report = parse_diag((REAL / name).read_text())
    assert report.version == version
    assert [(t.key, t.result) for t in report.tests] == [
        ("software", "Pass"),
        ("memory", "Pass"),
        ("pcie", "Fail"),
    ]
    pcie = report.test("pcie")
    assert [(e.kind, e.id, e.result) for e in pcie.entities] == [
        ("GPU", n, "Pass") for n in range(gpus)
    ]
    assert pcie.notes[0].kind == "Warning"
    assert pcie.notes[0].text.startswith("There was an internal error during the test: '")
    assert report.failed == [pcie] and not report.passed


def test_the_dcgm_4_json_document_of_a_real_gb10() -> None:
    report = parse_diag((REAL / "gb10_r1_json_software_fail_dcgm423.json").read_text())
    assert (report.source, report.version) == ("json", "4.2.3")
    assert report.metadata["Driver Version Detected"] == "580.82.09"
    assert report.metadata["GPU Device IDs Detected"] == "2e12"
    [software] = report.tests
    assert (software.section, software.key, software.result) == ("Deployment", "software", "Fail")
    assert [(e.kind, e.id, e.result) for e in software.entities] == [("GPU", 0, "Fail")]
    assert software.warnings.startswith("Persistence Mode: Persistence mode for GPU 0 is disabled")
    assert [n.kind for n in software.notes] == ["Warning", "Info"]
    assert report.failed == [software]


def test_the_dcgm_3_json_document_reads_like_its_table() -> None:
    # derived: the Blackwell table above written as DCGM 3.3.9's -j document (see README)
    table = parse_diag(BLACKWELL.read_text())
    doc = parse_diag((DERIVED / BLACKWELL.with_suffix(".json").name).read_text())
    assert doc.source == "json" and doc.metadata == table.metadata
    assert [(t.name, t.key, t.result) for t in doc.tests] == [
        (t.name, t.key, t.result) for t in table.tests
    ]
    assert [(e.id, e.result) for e in doc.test("PCIe").entities] == [(0, "Skip"), (1, "Skip")]
    assert not doc.passed


def test_json_with_a_banner_line_before_it_and_a_runtime_error() -> None:
    # synthetic, in the shape dcgmi/Diag.cpp writes when the diagnostic cannot start
    text = (
        "Successfully ran diagnostic for group.\n"
        '{"DCGM Diagnostic": {"runtime_error": "Unable to start nvvs", "version": "4.2.3"}}\n'
    )
    report = parse_diag(text)
    assert report.header == ("Successfully ran diagnostic for group.",)
    assert (report.runtime_error, report.version, report.tests) == (
        "Unable to start nvvs",
        "4.2.3",
        (),
    )
    assert not report.passed


def test_json_statuses_that_are_not_pass_are_never_read_as_pass() -> None:
    doc = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "GPU Memory", "results": [{"gpu_id": "0", "status": "PASS"},
                                           {"gpu_id": "1", "status": "Inconclusive"}]},
        {"name": "PCIe", "results": []},
    ]}]}}  # fmt: skip
    import json

    memory, pcie = parse_diag(json.dumps(doc)).tests
    assert memory.result == "Inconclusive" and memory.entities[0].result == "Pass"
    assert pcie.result == "Not Run"


def test_unreadable_json_is_named() -> None:
    with pytest.raises(ParseError, match="unreadable JSON document"):
        parse_diag('{"DCGM Diagnostic": {"test_categories": [\n')
    with pytest.raises(ParseError, match="no 'DCGM Diagnostic'"):
        parse_diag('{"something": 1}\n')


A10G = REAL / "a10g_x4_r3_targeted_power_fail_gpu1_dcgm339.txt"


def test_a_test_spanning_rows_reads_every_row_and_names_the_failing_gpu() -> None:
    """Real DCGM 3.3.9 on 4x A10G: "Targeted Power | Pass - GPUs: 0, 2, 3" and, on the next
    row, "Fail - GPU: 1". Reading only the first row made it a Pass."""
    report = parse_diag(A10G.read_text())
    power = report.test("Targeted Power")
    assert (power.result, power.scope) == ("Fail", "GPU: 1")
    assert [(e.id, e.result) for e in power.entities] == [
        (0, "Pass"), (2, "Pass"), (3, "Pass"), (1, "Fail"),
    ]  # fmt: skip
    assert power.warnings.startswith("GPU 1 Max power of 224.1 did not reach desired power")
    assert [n.text[:5] for n in power.notes if n.kind == "Info"] == ["GPU 0", "GPU 2", "GPU 3"]
    assert report.failed == [power] and not power.errored
    assert report.test("Memory Bandwidth").result == "Pass"
    assert report.test("PCIe").entities == ()  # "Pass - All" names no GPU


def test_a_test_that_failed_with_every_gpu_passing_is_dcgms_own_error() -> None:
    report = parse_diag((REAL / "l40s_x4_r2_pcie_internal_error_dcgm423.txt").read_text())
    assert report.test("pcie").errored
    assert not report.test("memory").errored  # passed
    fabric = parse_diag(FAIL.read_text())  # "Fail - All", no per-GPU rows: a real failure
    assert not fabric.test("GPU Memory").errored
