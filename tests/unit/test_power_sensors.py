"""kiln.power.sensors: BMC temperatures and fans against thresholds, discrete states as faults."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.power import SensorLimits, judge_sensors

FIXTURES = Path(__file__).parents[1] / "fixtures" / "power"
IPMITOOL = Path(__file__).parents[1] / "fixtures" / "real" / "ipmitool"
HP = FIXTURES / "real" / "sdr_elist_full_hp_proliant_dl360.txt"


def test_a_failed_power_supply_whose_status_column_says_ok_fails_the_node():
    """HP DL360: "Power Supply 1 | 06h | ok | 10.1 | 0 Watts, Presence detected, Failure
    detected". Judged on temperatures and fans only, this BMC passed."""
    result = judge_sensors(HP.read_text())
    assert result["problems"] == [
        "Power Supply 1: Failure detected (BMC status ok)",
        "Power Supplies: Non-Redundant: Sufficient from Redundant (BMC status ok)",
    ]
    # 27 temperatures with a reading; Temp 4 is "ns / Disabled"; HP fans read in percent.
    assert result["checked"] == 27
    assert {r["kind"] for r in result["readings"]} == {"temperature"}
    states = {d["name"]: d for d in result["discrete"]}
    assert states["Power Supply 2"]["faults"] == []  # "95 Watts, Presence detected"
    assert states["Fans"]["faults"] == []  # "0 percent, Fully Redundant"
    assert states["Memory"]["faults"] == []  # correctable ECC reports, it does not fail
    assert "Temp 4" not in states  # ns, Disabled: absent hardware is not a fault


@pytest.mark.parametrize(
    "name, problems",
    [
        (
            "sdr_type_power_supply_nvidia_dgx1_two_psu_ac_lost.txt",
            [
                "PSU Redundancy: Non-Redundant: Insufficient Resources (BMC status ok)",
                "PSU1 Status: Power Supply AC lost (BMC status ok)",
                "PSU2 Status: Power Supply AC lost (BMC status ok)",
            ],
        ),
        (
            "sdr_type_power_supply_dell_idrac6_psu2_ac_lost.txt",
            [
                "Status [65h, entity 10.2]: Power Supply AC lost (BMC status ok)",
                "PS Redundancy: Redundancy Degraded (BMC status ok)",
            ],
        ),
        ("sdr_type_power_supply_dell_poweredge_r740xd.txt", []),
    ],
)
def test_power_supply_states_of_real_bmcs(name, problems):
    result = judge_sensors((IPMITOOL / name).read_text())
    assert result["problems"] == problems


def test_the_ansible_header_of_a_capture_is_left_out_with_a_warning():
    result = judge_sensors(
        (IPMITOOL / "sdr_type_power_supply_dell_poweredge_r740xd.txt").read_text()
    )
    assert result["warnings"] == [
        "line 1 skipped (not ipmitool sdr output): 'dell-host | CHANGED | rc=0 >>'"
    ]


@pytest.mark.parametrize(
    "reading, faulty",
    [
        ("Presence detected, Predictive failure", True),
        ("Predictive Failure Asserted", True),
        ("Predictive Failure Deasserted", False),
        ("Presence detected, Config Error: Power Supply Rating Mismatch", True),
        ("Presence detected, AC lost or out-of-range", True),
        ("Drive Present, Drive Fault", True),
        ("Drive Present, In Failed Array", True),
        ("Drive Present, Hot Spare", False),
        ("Fully Redundant", False),
        ("Redundancy Lost", True),
        ("Transition to Critical from less severe", True),
        ("Transition to OK", False),
        ("Correctable ECC", False),
        ("Uncorrectable ECC", True),
        ("Processor Presence detected", False),
        ("IERR", True),
    ],
)
def test_discrete_states_ipmitool_prints(reading, faulty):
    # the state names of ipmitool's include/ipmitool/ipmi_sel.h, in the elist row shape
    result = judge_sensors(f"Sensor 1         | 70h | ok  | 10.1 | {reading}\n")
    assert bool(result["problems"]) is faulty


def test_a_sensor_with_no_reading_is_not_judged():
    text = "PS2 Status       | C9h | ns  | 10.2 | No Reading\nFAN3 | 43h | ns | 29.3 | Disabled\n"
    result = judge_sensors(text)
    assert (result["problems"], result["discrete"], result["checked"]) == ([], [], 0)


def test_real_hp_sdr_fails_a_tighter_temperature_limit_naming_the_sensor():
    result = judge_sensors(HP.read_text(), SensorLimits(temperature_max_c=70))
    assert result["problems"][2:] == ["Temp 28: 73 C is above 70 C"]


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
