"""nccl-tests all_reduce_perf: the recorded real text report, and its JSON transcription."""

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.parsers import ParseError
from kiln.parsers.nccl_tests import parse_json, parse_text

FIXTURES = Path(__file__).parent.parent / "fixtures"
TEXT = shared_capture("nccl-tests-all_reduce_perf/a100_sxm4_40gb_8gpu_single_node_superbench.txt")
JSON = FIXTURES / "derived/nccl-tests-json/a100_sxm4_40gb_8gpu_all_reduce_v2_schema.json"


def test_text_header_and_devices() -> None:
    result = parse_text(TEXT.read_text())
    assert result.params["nThread"] == 1
    assert result.params["nGpus"] == 8
    assert result.params["maxBytes"] == 8589934592
    assert result.params["iters"] == 20
    assert result.params["warmup iters"] == 5
    assert result.params["validation"] == 0
    assert len(result.devices) == 8
    dev = result.devices[7]
    assert (dev.rank, dev.pid, dev.host, dev.device) == (7, 112424, "localhost", 7)
    assert (dev.bus_id, dev.name, dev.group) == ("0x00", "A100-SXM4-40GB", None)
    assert result.hosts == ["localhost"]


def test_text_rows_and_footer() -> None:
    result = parse_text(TEXT.read_text())
    assert len(result.rows) == 34  # two size-0 rows, 4 B .. 8 GiB; the NCCL INFO line skipped
    row = result.row(1073741824)
    assert (row.count, row.dtype, row.redop, row.root) == (268435456, "float", "sum", None)
    assert row.out_of_place is not None and row.in_place is not None
    assert row.out_of_place.time_us == 8159.5
    assert row.out_of_place.algbw_gbs == 131.59
    assert row.out_of_place.busbw_gbs == 230.29
    assert row.out_of_place.wrong is None  # validation off: N/A
    assert row.in_place.busbw_gbs == 229.81
    peak = max(r.out_of_place.busbw_gbs for r in result.rows if r.out_of_place)
    assert peak == 235.26
    assert result.avg_busbw_gbs == 68.4048
    assert result.out_of_bounds == 0
    assert result.wrong_total == 0


def test_json_matches_text() -> None:
    text = parse_text(TEXT.read_text())
    doc = parse_json(JSON.read_text())
    assert doc.rows == tuple(
        type(r)(r.size_bytes, r.count, r.dtype, r.redop, -1, r.out_of_place, r.in_place)
        for r in text.rows
    )
    assert doc.avg_busbw_gbs == 68.4048
    assert doc.out_of_bounds == 0
    assert doc.params["ngpus"] == 8
    assert len(doc.devices) == 8 and doc.devices[0].name == "A100-SXM4-40GB"


def test_text_malformed_row() -> None:
    lines = TEXT.read_text().splitlines()
    lines[20] = "        8192          2048   float     sum    35.91    0.23"
    with pytest.raises(ParseError) as info:
        parse_text("\n".join(lines))
    assert info.value.tool == "nccl-tests"
    assert info.value.line_no == 21


def test_text_without_table() -> None:
    with pytest.raises(ParseError, match="no result table header"):
        parse_text("# nThread 1 nGpus 8\n# Using devices\n")


def test_text_of_a_failed_test_names_its_failure() -> None:
    with pytest.raises(ParseError, match="the test failed before its first size at line 2"):
        parse_text(
            "# nThread 1 nGpus 8\nTest CUDA failure common.cu:941 'system not yet initialized'\n"
        )


def test_json_malformed() -> None:
    with pytest.raises(ParseError) as info:
        parse_json('{"version": 2,\n "results": [\n')
    assert info.value.line_no == 3


def test_a_run_that_failed_at_32_gib_keeps_what_it_measured() -> None:
    """nccl-tests issue #322: 128 H100 nodes measured 1-16 GiB, then failed at 32 GiB."""
    ring = "h100_80gb_128node_ring_1g_to_16g_trimmed_issue322.txt"
    result = parse_text((FIXTURES / "real/nccl-tests-all_reduce_perf" / ring).read_text())
    assert result.row(8589934592).out_of_place.busbw_gbs == 364.57  # type: ignore[union-attr]
    assert result.failure is not None
    assert result.failure.startswith("HCA-128: Test NCCL failure common.cu:1204")
