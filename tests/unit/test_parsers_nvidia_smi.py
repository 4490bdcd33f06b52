"""nvidia-smi -q -x and --query-gpu CSV against recorded real outputs."""

from pathlib import Path

import pytest

from kiln.parsers import ParseError
from kiln.parsers.nvidia_smi import parse_query_gpu_csv, parse_xml

FIXTURES = Path(__file__).parent.parent / "fixtures"
A100_XML = FIXTURES / "real/nvidia-smi-q-x/a100_sxm4_80gb_mig_telegraf.xml"
A100_FAULTY_XML = FIXTURES / "derived/nvidia-smi-q-x/a100_sxm4_80gb_faulty_ecc_thermal.xml"
H100_CSV = FIXTURES / "real/nvidia-smi-query-gpu-csv/h100_80gb_hbm3_allfields_idle.csv"


def test_xml_a100_header_and_identity() -> None:
    log = parse_xml(A100_XML.read_text())
    assert log.driver_version == "535.54.03"
    assert log.cuda_version == "12.2"
    # The header says 4 GPUs, the (upstream-trimmed) document holds one: both are reported.
    assert log.attached_gpus == 4
    assert log.gpu_count == 1
    gpu = log.gpus[0]
    assert gpu.product_name == "NVIDIA A100-SXM4-80GB"
    assert gpu.product_architecture == "Ampere"
    assert gpu.serial == "1650522003820"
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.pci_bus_id == "00000000:01:00.0"
    assert gpu.board_part_number == "692-2G506-0212-002"
    assert gpu.module_id == 4
    assert gpu.memory_total_mib == 81920
    assert (gpu.pcie_gen_current, gpu.pcie_width_current) == (4, 16)


def test_xml_a100_modes_power_clocks_health() -> None:
    gpu = parse_xml(A100_XML.read_text()).gpus[0]
    assert gpu.persistence_mode is False
    assert (gpu.mig_mode_current, gpu.mig_mode_pending, gpu.mig_device_count) == (True, True, 4)
    assert (gpu.ecc_mode_current, gpu.ecc_mode_pending) == (True, True)
    assert gpu.ecc_errors.volatile_uncorrectable == 0
    assert gpu.ecc_errors.aggregate_uncorrectable == 0
    # A100 uses row remapping; this driver prints <remapped_rows>N/A</remapped_rows>.
    assert gpu.remapped_rows.uncorrectable is None
    assert gpu.retired_pages.double_bit is None
    power = gpu.power
    assert power.draw_w == pytest.approx(67.03)
    assert (power.current_limit_w, power.default_limit_w) == (500.0, 500.0)
    assert (power.min_limit_w, power.max_limit_w) == (100.0, 500.0)
    assert power.requested_limit_w == 500.0
    assert power.enforced_limit_w is None  # v12 XML has no enforced_power_limit
    assert gpu.clocks.sm_mhz == 1275
    assert gpu.clocks.max_sm_mhz == 1410
    assert gpu.clocks.memory_mhz == 1593
    assert gpu.temperature.gpu_c == 27
    assert gpu.temperature.memory_c == 44
    assert gpu.temperature.slowdown_c == 89
    assert gpu.temperature.shutdown_c == 92
    assert gpu.clock_event_reasons["hw_thermal_slowdown"] is False
    assert len(gpu.clock_event_reasons) == 9
    assert gpu.active_clock_event_reasons == []
    assert gpu.fabric_state is None  # no NVSwitch fabric reported ("N/A")
    assert gpu.reset_required is False


def test_xml_faulty_gpu_derived() -> None:
    gpu = parse_xml(A100_FAULTY_XML.read_text()).gpus[0]
    assert gpu.ecc_errors.volatile_uncorrectable == 2
    assert gpu.ecc_errors.aggregate_uncorrectable == 2
    assert gpu.ecc_errors.volatile_correctable == 0
    assert gpu.active_clock_event_reasons == ["hw_slowdown", "hw_thermal_slowdown"]
    assert gpu.reset_required is True


def test_xml_malformed_names_line() -> None:
    broken = A100_XML.read_text().replace("</serial>", "</serail>", 1)
    with pytest.raises(ParseError) as info:
        parse_xml(broken)
    assert info.value.tool == "nvidia-smi -q -x"
    assert info.value.line_no == 152
    assert "serail" in str(info.value)


def test_xml_wrong_root() -> None:
    with pytest.raises(ParseError, match="expected <nvidia_smi_log>"):
        parse_xml("<foo/>")


def test_csv_h100_all_fields() -> None:
    rows = parse_query_gpu_csv(H100_CSV.read_text())
    assert len(rows) == 1
    row = rows[0]
    assert len(row.values) == 212
    assert row.get_text("name") == "NVIDIA H100 80GB HBM3"
    assert row.get_text("driver_version") == "590.48.01"
    assert row.get_text("pci.bus_id") == "00000000:00:09.0"
    assert row.get_int("count") == 1
    # units stripped, header unit kept aside
    assert row.get_float("power.limit") == 700.0
    assert row.units["power.limit"] == "W"
    assert row.get_float("enforced.power.limit") == 700.0
    assert row.get_float("power.min_limit") == 200.0
    assert row.get_float("power.draw.instant") == pytest.approx(69.62)
    assert row.get_int("memory.total") == 81559
    assert row.get_int("clocks.max.sm") == 1980
    assert row.get_int("temperature.gpu") == 41
    assert row.get_text("edpp_multiplier") == "100.00"
    assert row.get_flag("persistence_mode") is True
    assert row.get_flag("mig.mode.current") is False
    assert row.get_flag("clocks_event_reasons.gpu_idle") is True
    assert row.get_flag("clocks_event_reasons.hw_thermal_slowdown") is False
    assert row.get_int("clocks_event_reasons.active") == 1
    assert row.get_text("fabric.state") == "Completed"
    # placeholders -> None
    assert row.get_text("hostname") is None  # [N/A]
    assert row.get_text("clocks.applications.graphics") is None  # [...deprecated]
    assert row.get_text("platform.chassis_serial_number") is None  # empty cell
    assert row.get_text("fabric.health.summary") is None  # bare N/A
    assert row.get_float("module.power.limit") is None


def test_csv_noheader_nounits_with_fields() -> None:
    # The values of the real row, as `--format=csv,noheader,nounits` would print them.
    rows = parse_query_gpu_csv(
        "0, 700.00, Enabled, [N/A]\n", fields=["index", "power.limit", "persistence_mode", "x"]
    )
    assert rows[0].get_float("power.limit") == 700.0
    assert rows[0].get_flag("persistence_mode") is True
    assert rows[0].get_text("x") is None


def test_csv_malformed_row() -> None:
    header, row = H100_CSV.read_text().splitlines()[:2]
    with pytest.raises(ParseError) as info:
        parse_query_gpu_csv(f"{header}\n{row}\n0, 1\n")
    assert info.value.line_no == 3
    assert "2 columns where the header has 212" in str(info.value)


def test_csv_missing_header() -> None:
    row = H100_CSV.read_text().splitlines()[1]
    with pytest.raises(ParseError, match="not a --query-gpu header"):
        parse_query_gpu_csv(row)
