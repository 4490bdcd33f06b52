"""ib_write_bw against two recorded real reports (MB/sec and --report_gbits)."""

import pytest

from captures import shared_capture
from kiln.parsers import ParseError
from kiln.parsers.ib_write_bw import parse_ib_write_bw

LOOPBACK = shared_capture(
    "ib_write_bw/loopback_all_sizes_MBps_server_client_interleaved_superbench.txt"
)
ROCE = shared_capture("ib_write_bw/roce_100g_server_report_gbits_duration5_hpe_shs_docs.txt")


def test_loopback_all_sizes_mbps() -> None:
    result = parse_ib_write_bw(LOOPBACK.read_text())
    assert result.test == "RDMA_Write BW Test"
    assert result.unit == "MB/sec"
    assert result.device == "ib0"
    assert result.link_type == "IB"
    assert result.settings["TX depth"] == "128"
    assert result.settings["Mtu"] == "4096[B]"
    # 2 B .. 8 MiB; the client's repeated last row is kept once
    assert len(result.rows) == 23
    assert [r.bytes for r in result.rows][:3] == [2, 4, 8]
    row = next(r for r in result.rows if r.bytes == 65536)
    assert (row.iterations, row.bw_peak, row.bw_average) == (2000, 23330.56, 21167.79)
    assert row.msg_rate_mpps == pytest.approx(0.338685)
    largest = result.largest
    assert largest.bytes == 8388608
    assert largest.bw_average == 23240.68
    # perftest's MB is 2^20 bytes: 23240.68 MiB/s = 194.96 Gb/s on this HDR link
    assert largest.bw_average_gbps == pytest.approx(194.957, abs=0.001)
    assert result.local_lid == 0xD06


def test_roce_report_gbits_duration_mode() -> None:
    result = parse_ib_write_bw(ROCE.read_text())
    assert result.unit == "Gb/sec"
    assert result.device == "mlx5_0"
    assert result.link_type == "Ethernet"
    assert result.settings["GID index"] == "3"
    assert result.settings["Dual-port"] == "OFF"
    assert len(result.rows) == 1
    row = result.rows[0]
    assert (row.bytes, row.iterations) == (65536, 560960)
    assert row.bw_peak == 0.0  # duration mode prints no peak
    assert row.bw_average == row.bw_average_gbps == 98.03
    assert row.msg_rate_mpps == pytest.approx(0.186974)


def test_malformed_row_before_header() -> None:
    text = "65536      560960           0.00               98.03              0.186974\n"
    with pytest.raises(ParseError) as info:
        parse_ib_write_bw(text)
    assert info.value.tool == "ib_write_bw"
    assert info.value.line_no == 1


def test_no_result_table() -> None:
    text = "\n".join(ROCE.read_text().splitlines()[:20])  # the client never connected
    with pytest.raises(ParseError, match="no result table"):
        parse_ib_write_bw(text)
