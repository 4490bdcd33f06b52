"""kiln.power.sensors: BMC temperatures and fans judged against thresholds."""

from __future__ import annotations

from pathlib import Path

from kiln.power import SensorLimits, judge_sensors

FIXTURES = Path(__file__).parents[1] / "fixtures" / "power"


def test_real_hp_sdr_passes_default_limits_and_skips_disabled_and_percent_sensors():
    result = judge_sensors((FIXTURES / "real" / "sdr_elist_full_hp_proliant_dl360.txt").read_text())
    assert result["problems"] == []
    # 27 temperatures with a reading; Temp 4 is "ns / Disabled"; HP fans read in percent.
    assert result["checked"] == 27
    assert {r["kind"] for r in result["readings"]} == {"temperature"}


def test_real_hp_sdr_fails_a_tighter_temperature_limit_naming_the_sensor():
    text = (FIXTURES / "real" / "sdr_elist_full_hp_proliant_dl360.txt").read_text()
    result = judge_sensors(text, SensorLimits(temperature_max_c=70))
    assert result["problems"] == ["Temp 28: 73 C is above 70 C"]


def test_failing_fans_and_hot_inlet_are_named():
    result = judge_sensors(
        (FIXTURES / "derived" / "sdr_elist_failing_fan_hot_inlet.txt").read_text()
    )
    assert result["problems"] == [
        "Fan1B: 0 RPM (BMC status cr)",
        "Fan2A: 240 RPM is below 300 RPM",
        "Inlet Temp: 41 C is above 35 C",
        "Temp: 96 C is above 90 C",
    ]


def test_healthy_vendor_layouts_pass():
    for name in ("sdr_elist_dell_gpu_server.txt", "sdr_elist_supermicro_gpu_server.txt"):
        result = judge_sensors((FIXTURES / "derived" / name).read_text())
        assert result["problems"] == [] and result["checked"] >= 6, name
