"""dcgmi diag -r 3 against a recorded real failure (8x H100, fabric manager not running)."""

from pathlib import Path

import pytest

from kiln.parsers import ParseError
from kiln.parsers.dcgmi import parse_diag

REAL = Path(__file__).parent.parent / "fixtures/real/dcgmi-diag"
FAIL = REAL / "h100x8_r3_fail_cuinit_no_fabricmanager_dcgm338.txt"


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
