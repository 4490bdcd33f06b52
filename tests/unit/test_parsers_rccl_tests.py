"""rccl-tests (AMD's fork of nccl-tests) read by the nccl-tests reader: real outputs from AMD
Instinct GPUs quoted in public threads (tests/fixtures/real/rccl-tests-all_reduce_perf/SOURCE.txt;
AMD's published figures in tests/fixtures/real/AMD_FIGURES.txt)."""

import pytest

from captures import OURS
from kiln.burnin.nccl_tests import complete
from kiln.parsers import ParseError
from kiln.parsers.nccl_tests import parse_text

RCCL = OURS / "rccl-tests-all_reduce_perf"
MI300X = RCCL / "mi300x_8gpu_single_node_8M_to_1G_header_and_first_row_only_hpc_ai_envs_pr30.txt"


def test_an_mi300x_node_reads_as_an_nvidia_one() -> None:
    result = parse_text(MI300X.read_text())
    assert (result.params["nThread"], result.params["nGpus"]) == (1, 8)
    assert [d.device for d in result.devices] == list(range(8))
    assert {d.name for d in result.devices} == {"AMD Instinct MI300X"}
    assert result.hosts == ["g100n126"]
    row = result.row(8388608)
    assert row.out_of_place is not None and row.out_of_place.busbw_gbs == 161.14
    assert result.wrong_total == 0


def test_the_rccl_tests_version_line_is_kept_in_the_document() -> None:
    doc = complete(
        {"implementation": "nccl-tests", "output": MI300X.read_text(), "verdict_bytes": 8388608}
    )
    assert doc["nccl_tests_version"] == "develop:83d38d9"
    assert doc["verdict_busbw_gbs"] == 161.14


def test_a_two_node_mi250x_table_without_its_banner() -> None:
    result = parse_text(
        (RCCL / "mi250x_1M_to_256M_table_fragment_no_header_hpc_ai_envs_pr21.txt").read_text()
    )
    assert [r.size_bytes for r in result.rows] == [2**p for p in range(20, 29)]
    assert result.row(268435456).out_of_place.busbw_gbs == 90.96  # type: ignore[union-attr]
    assert result.devices == () and result.avg_busbw_gbs is None


def test_a_test_that_failed_says_why_and_where() -> None:
    """rccl-tests on four MI210 stopped before its first size: the reader names the failure
    (RCCL's 'internal error' on sharbox-ultra), not a missing table."""
    failed = RCCL / "mi210_4gpu_single_node_test_nccl_failure_internal_error_issue50.txt"
    with pytest.raises(ParseError) as info:
        parse_text(failed.read_text())
    message = str(info.value)
    assert "test failed on sharbox-ultra" in message
    assert "Test NCCL failure common.cu:1285 'internal error" in message
    assert info.value.line_no == 8


def test_a_failure_after_some_sizes_keeps_them_and_says_so() -> None:
    """The sizes measured before the failure stay results (each was checked), and the document
    carries the tool's failure line, so the report says why the larger sizes are missing."""
    table = (RCCL / "mi250x_1M_to_256M_table_fragment_no_header_hpc_ai_envs_pr21.txt").read_text()
    failure = (
        (RCCL / "mi210_4gpu_single_node_test_nccl_failure_internal_error_issue50.txt")
        .read_text()
        .splitlines()[-2]
    )
    result = parse_text(table + failure + "\n")
    assert len(result.rows) == 9
    assert result.failure == failure.strip()
    doc = complete({"implementation": "nccl-tests", "output": table + failure + "\n"})
    assert doc["failure"].startswith("sharbox-ultra: Test NCCL failure common.cu:1285")
    assert doc["verdict_busbw_gbs"] == 90.96  # no 8 GiB row: the largest measured


def test_a_tail_without_its_table_header_is_not_a_result() -> None:
    """Only the last sizes and the footer of a run: nothing says what the columns are."""
    with pytest.raises(ParseError, match="no result table header"):
        parse_text((RCCL / "ainic_tail_2G_to_16G_avg_busbw_fragment_rccl_pr2078.txt").read_text())
