"""ipmitool fru print / mc info against recorded real outputs; sdr shape checks."""

from pathlib import Path

import pytest

from kiln.parsers import ParseError
from kiln.parsers.ipmitool import parse_fru, parse_mc_info, parse_sdr

REAL = Path(__file__).parent.parent / "fixtures/real/ipmitool"


def test_fru_dgx_a100() -> None:
    [record] = parse_fru((REAL / "fru_print_0_nvidia_dgx_a100.txt").read_text())
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
    body = (REAL / "fru_print_0_nvidia_dgx_a100.txt").read_text()
    text = (
        " FRU Device Description : Builtin FRU Device (ID 0)\n"
        + body
        + "\n FRU Device Description : PSU1 (ID 1)\n"
    )
    records = parse_fru(text)
    assert [r.description for r in records] == ["Builtin FRU Device (ID 0)", "PSU1 (ID 1)"]
    assert records[0].board_product == "DGXA100" and records[1].fields == {}


def test_mc_info_hp_ilo() -> None:
    info = parse_mc_info((REAL / "mc_info_hp_proliant_ilo.txt").read_text())
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
    assert info.value.line_no == 2


def test_fru_malformed() -> None:
    with pytest.raises(ParseError) as info:
        parse_fru(" Board Mfg             : NVIDIA\nDevice not present (Requested sensor)\n")
    assert info.value.line_no == 2


# No real `ipmitool sdr` output is recorded yet (see the report): these check the documented row
# shapes only: `sdr list` "name | reading | status" and `sdr elist` with id and entity columns.
def test_sdr_row_shapes_synthetic() -> None:
    sensors = parse_sdr(
        "Inlet Temp       | 23 degrees C      | ok\n"
        "PS2 Status       | 0x0a              | cr\n"
        "Fan1 RPM         | no reading        | ns\n"
        "Exhaust Temp     | 30h | ok  |  7.1 | 38 degrees C\n"
    )
    assert [(s.name, s.value, s.unit, s.status) for s in sensors] == [
        ("Inlet Temp", 23.0, "degrees C", "ok"),
        ("PS2 Status", None, None, "cr"),
        ("Fan1 RPM", None, None, "ns"),
        ("Exhaust Temp", 38.0, "degrees C", "ok"),
    ]
    assert sensors[1].is_critical and sensors[3].entity == "7.1"


def test_sdr_malformed() -> None:
    with pytest.raises(ParseError) as info:
        parse_sdr("Inlet Temp | 23 degrees C | ok\nUnable to open SDR for reading\n")
    assert info.value.tool == "ipmitool sdr"
    assert info.value.line_no == 2
