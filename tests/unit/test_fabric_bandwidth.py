"""Per-rail ib_write_bw judged against a floor per link rate, on recorded real reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.fabric.bandwidth import RailMeasurement, floor_gbps, judge_rail
from kiln.parsers.ib_write_bw import parse_ib_write_bw

HDR_LOOPBACK = shared_capture(
    "ib_write_bw/loopback_all_sizes_MBps_server_client_interleaved_superbench.txt"
)
ROCE_100G = shared_capture("ib_write_bw/roce_100g_server_report_gbits_duration5_hpe_shs_docs.txt")


def measurement(path: Path, rail: int = 0, client: str = "gpu001", server: str = "gpu002"):
    return RailMeasurement(
        rail, client, server, f"mlx5_{rail}", parse_ib_write_bw(path.read_text())
    )


@pytest.mark.parametrize(("rate", "floor"), [(400, 360.0), (200, 180.0), (100, 90.0), (56, 47.6)])
def test_floor_is_a_share_of_line_rate(rate, floor):
    assert floor_gbps(rate) == pytest.approx(floor)


def test_hdr_loopback_passes_hdr_and_fails_an_ndr_floor():
    # 23240.68 MiB/s at 8 MiB = 194.96 Gb/s
    ok = judge_rail(measurement(HDR_LOOPBACK), link_rate_gbps=200)
    assert ok.passed and ok.measured_gbps == pytest.approx(194.96, abs=0.01)
    assert ok.reason == "rail 0 (ib0) gpu001 -> gpu002: 195.0 Gb/s, 97% of 200 Gb/s"
    bad = judge_rail(measurement(HDR_LOOPBACK), link_rate_gbps=400)
    assert not bad.passed
    assert bad.reason == (
        "rail 0 (ib0) gpu001 -> gpu002: 195.0 Gb/s at 8388608 B is below the floor 360.0 Gb/s "
        "(49% of 400 Gb/s)"
    )


def test_report_gbits_output_and_an_explicit_floor():
    assert judge_rail(measurement(ROCE_100G), 100).passed  # 98.03 Gb/s >= 90
    strict = judge_rail(measurement(ROCE_100G), 100, floor_pct=99)
    assert not strict.passed and strict.floor_gbps == pytest.approx(99.0)
    assert strict.to_dict()["measured_gbps"] == 98.03
