"""ipmitool fru print / mc info / sdr against recorded real outputs (and a few shape checks)."""

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.parsers import ParseError
from kiln.parsers.ipmitool import parse_fru, parse_mc_info, parse_sdr, read_sdr

REAL = Path(__file__).parent.parent / "fixtures/real/ipmitool"
POWER = Path(__file__).parent.parent / "fixtures/power/real"


def test_fru_dgx_a100() -> None:
    [record] = parse_fru(shared_capture("ipmitool/fru_print_0_nvidia_dgx_a100.txt").read_text())
    assert record.description is None  # `fru print 0` omits the header line
    assert record.board_manufacturer == "NVIDIA"
    assert record.board_product == "DGXA100"
    assert record.board_serial == "5550690100092246NA"
    assert record.product_manufacturer == "NVIDIA"
    assert record.product_name == "DGXA100"
    assert record.product_serial == "1571620610013"
    assert record.fields["Chassis Part Number"] == "920-23687-2531-001"
    assert record.fields["Board Mfg Date"] == "Mon Aug  8 05:13:00 2022"


def test_fru_several_devices() -> None:
    body = shared_capture("ipmitool/fru_print_0_nvidia_dgx_a100.txt").read_text()
    text = (
        " FRU Device Description : Builtin FRU Device (ID 0)\n"
        + body
        + "\n FRU Device Description : PSU1 (ID 1)\n"
    )
    records = parse_fru(text)
    assert [r.description for r in records] == ["Builtin FRU Device (ID 0)", "PSU1 (ID 1)"]
    assert records[0].board_product == "DGXA100" and records[1].fields == {}


def test_mc_info_hp_ilo() -> None:
    info = parse_mc_info(shared_capture("ipmitool/mc_info_hp_proliant_ilo.txt").read_text())
    assert info.manufacturer_id == 11
    assert info.manufacturer_name == "Hewlett-Packard"
    assert info.product_id == 0x2000
    assert info.product_name == "Unknown (0x2000)"
    assert info.firmware_revision == "1.28"
    assert info.fields["IPMI Version"] == "2.0"
    assert info.additional_device_support == (
        "Sensor Device",
        "SDR Repository Device",
        "SEL Device",
        "FRU Inventory Device",
    )


def test_mc_info_malformed() -> None:
    with pytest.raises(ParseError) as info:
        parse_mc_info("Device ID                 : 19\nCould not open device at /dev/ipmi0\n")
    assert info.value.tool == "ipmitool mc info"
    assert info.value.line_no == 2  # the line that says why there is no Manufacturer ID


def test_mc_info_dell_idrac9() -> None:
    info = parse_mc_info((REAL / "mc_info_dell_idrac9_fw700_poweredge_r540.txt").read_text())
    assert (info.manufacturer_id, info.manufacturer_name) == (674, "Dell Inc.")
    assert (info.product_id, info.product_name, info.firmware_revision) == (
        256, "Unknown (0x100)", "7.00")  # fmt: skip
    assert info.additional_device_support[-1] == "Chassis Device"


def test_fru_of_every_device_with_the_ones_that_did_not_answer() -> None:
    """Dell R540: the board, PSUs, backplane, PERC; "Device not present (Timeout)" under the
    devices that did not answer is their note, not an error."""
    records = parse_fru((REAL / "fru_print_dell_poweredge_r540.txt").read_text())
    board = records[0]
    assert (board.description, board.board_manufacturer, board.product_name) == (
        "Builtin FRU Device (ID 0)", "DELL", "PowerEdge R540")  # fmt: skip
    assert board.board_product == "PowerEdge R540" and board.product_serial == "DR8L3N2"
    notes = {r.description: r.notes for r in records if r.notes}
    assert notes == {
        "NDC (ID 4)": ("Device not present (Timeout)",),
        "BP0 (ID 12)": ("Device not present (Timeout)",),
        "OCP Mezz (ID 7)": ("Device not present (Timeout)",),
        "PERC2 (ID 11)": ("Device not present (Parameter out of range)",),
    }
    assert records[1].fields["Board Product"] == "PWR SPLY,750W,RDNT,DELTA"


def test_fru_nothing_usable() -> None:
    with pytest.raises(ParseError) as info:
        parse_fru("Error: Unable to establish IPMI v2 / RMCP+ session\n")
    assert (info.value.tool, info.value.line_no) == ("ipmitool fru", 1)


def test_sdr_row_shapes_synthetic() -> None:
    sensors = parse_sdr(
        "Inlet Temp       | 23 degrees C      | ok\n"
        "PS2 Status       | 0x0a              | cr\n"
        "Fan1 RPM         | no reading        | ns\n"
        "Exhaust Temp     | 30h | ok  |  7.1 | 38 degrees C\n"
    )
    assert [(s.name, s.value, s.unit, s.status, s.states) for s in sensors] == [
        ("Inlet Temp", 23.0, "degrees C", "ok", ()),
        ("PS2 Status", None, None, "cr", ()),  # sdr list: raw hex, no states to read
        ("Fan1 RPM", None, None, "ns", ()),
        ("Exhaust Temp", 38.0, "degrees C", "ok", ()),
    ]
    assert sensors[1].is_critical and sensors[3].entity == "7.1"
    assert not sensors[2].has_reading


def test_sdr_discrete_states_with_status_ok() -> None:
    """HP DL360: a failed power supply reads "ok" in the status column; its states say it."""
    sensors = {
        s.name: s for s in parse_sdr((POWER / "sdr_elist_full_hp_proliant_dl360.txt").read_text())
    }
    psu = sensors["Power Supply 1"]
    assert (psu.status, psu.value, psu.unit) == ("ok", 0.0, "Watts")
    assert psu.states == ("Presence detected", "Failure detected")
    assert sensors["Fan Block 1"].states == ("Transition to Running",)
    assert sensors["Fan Block 1"].unit == "percent"
    assert sensors["Memory"].states == (
        "Correctable ECC",
        "Correctable ECC logging limit reached",
        "Presence Detected",
    )
    assert (sensors["Temp 4"].status, sensors["Temp 4"].has_reading) == ("ns", False)


def test_sdr_state_with_a_comma_of_its_own() -> None:
    [psu] = parse_sdr("PS1 Status       | C8h | ok  | 10.1 | Presence detected, AC out-of-range, "
                      "but present\n")  # fmt: skip
    assert psu.states == ("Presence detected", "AC out-of-range, but present")


def test_sdr_lines_that_are_not_sensors_are_skipped_and_listed() -> None:
    """The real DGX-1 capture starts with ansible's own header; ipmitool's complaints folded in
    (as telegraf records them: "Unable to send command: Invalid argument") are left out too."""
    text = (REAL / "sdr_type_power_supply_nvidia_dgx1_two_psu_ac_lost.txt").read_text()
    reading = read_sdr(text.replace("PSU3", "Unable to send command: Invalid argument\nPSU3"))
    assert [s.name for s in reading.sensors] == [
        "PSU Alert", "PSU Redundancy", "PSU1 Status", "PSU2 Status", "PSU3 Status", "PSU4 Status",
    ]  # fmt: skip
    assert [(s.line_no, s.reason) for s in reading.skipped] == [
        (1, "not ipmitool sdr output"),
        (6, "not ipmitool sdr output"),
    ]
    assert reading.skipped[0].line == "dgx-host | CHANGED | rc=0 >>"
    assert reading.sensors[2].states == ("Presence detected", "Power Supply AC lost")


def test_sdr_malformed() -> None:
    with pytest.raises(ParseError) as info:
        parse_sdr("Inlet Temp | 23 degrees C | ok\nFan1 | 30h | ok | 7.1\n")
    assert info.value.tool == "ipmitool sdr"
    assert info.value.line_no == 2  # a sensor row cut short: never silently dropped


def test_sdr_nothing_usable() -> None:
    with pytest.raises(ParseError, match="no sensor rows found") as info:
        parse_sdr("Unable to open SDR for reading\n")
    assert info.value.line_no == 1
