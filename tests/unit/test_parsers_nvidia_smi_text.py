"""Plain-text nvidia-smi -q against recorded real outputs: the same model as the XML reader."""

from dataclasses import asdict
from pathlib import Path

import pytest

from captures import real_captures, shared_capture
from kiln.parsers import ParseError
from kiln.parsers.nvidia_smi import Gpu, NvidiaSmiLog, parse_xml
from kiln.parsers.nvidia_smi_text import parse_text

FIXTURES = Path(__file__).parent.parent / "fixtures"
TEXT = FIXTURES / "real/nvidia-smi-q"
H100_8GPU = TEXT / "h100_80gb_hbm3_8gpu_q_drv535_gpud.txt"
H100_DRV590 = shared_capture("nvidia-smi-q/h100_sxm_80gb_hbm3_q_idle_drv590.txt")
A10_PENDING = TEXT / "a10_q_remapped_rows_pending_drv535_gpud.txt"
TITAN_V = TEXT / "titan_v_q_ecc_off_drv560_gpud.txt"
A100_XML = shared_capture("nvidia-smi-q-x/a100_sxm4_80gb_mig_telegraf.xml")


def test_every_real_capture_reads_every_gpu_without_warnings():
    for path in real_captures("nvidia-smi-q", "*.txt"):
        warnings: list[str] = []
        log = parse_text(path.read_text(), warnings)
        assert warnings == [], path.name
        assert log.gpu_count == log.attached_gpus, path.name
        assert all(gpu.product_name and gpu.pci_bus_id for gpu in log.gpus), path.name


def test_same_model_as_the_xml_reader():
    text_gpu = parse_text(H100_8GPU.read_text()).gpus[0]
    xml_gpu = parse_xml(A100_XML.read_text()).gpus[0]
    assert type(text_gpu) is type(xml_gpu) is Gpu
    # The reasons are keyed by the XML's names, so rules written for one read the other.
    assert set(text_gpu.clock_event_reasons) == set(xml_gpu.clock_event_reasons)


def test_a10_with_remapped_rows_pending_golden():
    """A real A10 (driver 535.129.03) with 4 uncorrectable-error rows waiting for a GPU reset."""
    log = parse_text(A10_PENDING.read_text())
    assert isinstance(log, NvidiaSmiLog)
    assert (log.timestamp, log.driver_version, log.cuda_version) == (
        "Wed Sep 25 10:40:24 2024",
        "535.129.03",
        "12.2",
    )
    assert asdict(log.gpus[0]) == {
        "index": 0,
        "pci_bus_id": "00000000:07:00.0",
        "product_name": "NVIDIA A10",
        "product_architecture": "Ampere",
        "serial": "1324521052681",
        "uuid": "GPU-73d12ef7-f589-f867-4259-c7090ab44736",
        "board_part_number": "900-2G133-0020-100",
        "vbios_version": "94.02.5C.00.04",
        "module_id": 1,
        "persistence_mode": True,
        "mig_mode_current": None,
        "mig_mode_pending": None,
        "mig_device_count": 0,
        "ecc_mode_current": True,
        "ecc_mode_pending": True,
        "ecc_errors": {
            "volatile_correctable": 0,
            "volatile_uncorrectable": 0,
            "aggregate_correctable": 0,
            "aggregate_uncorrectable": 0,
        },
        "retired_pages": {"single_bit": None, "double_bit": None, "pending": None},
        "remapped_rows": {"correctable": 0, "uncorrectable": 4, "pending": True, "failure": False},
        "power": {
            "draw_w": 43.89,
            "current_limit_w": 150.0,
            "requested_limit_w": 150.0,
            "default_limit_w": 150.0,
            "min_limit_w": 100.0,
            "max_limit_w": 150.0,
            "enforced_limit_w": None,
        },
        "clocks": {
            "graphics_mhz": 225,
            "sm_mhz": 225,
            "memory_mhz": 405,
            "video_mhz": 555,
            "max_graphics_mhz": 1695,
            "max_sm_mhz": 1695,
            "max_memory_mhz": 6251,
            "applications_graphics_mhz": 1695,
            "applications_memory_mhz": 6251,
        },
        "temperature": {
            "gpu_c": 33,
            "memory_c": None,
            "slowdown_c": 98,
            "shutdown_c": 101,
            "max_operating_c": 91,
        },
        "performance_state": "P8",
        "clock_event_reasons": {
            "gpu_idle": True,
            "applications_clocks_setting": False,
            "sw_power_cap": False,
            "hw_slowdown": False,
            "hw_thermal_slowdown": False,
            "hw_power_brake_slowdown": False,
            "sync_boost": False,
            "sw_thermal_slowdown": False,
            "display_clocks_setting": False,
        },
        "memory_total_mib": 23028,
        "pcie_gen_current": 4,
        "pcie_gen_max": 4,
        "pcie_width_current": 16,
        "pcie_width_max": 16,
        "fabric_state": None,
        "fabric_status": None,
        "reset_required": False,
        # The text reading carries no NVLink domain (no GB200 text capture to read it from).
        "fabric_clique_id": None,
        "fabric_cluster_uuid": None,
    }


def test_eight_h100s_driver_535():
    log = parse_text(H100_8GPU.read_text())
    assert (log.driver_version, log.attached_gpus, log.gpu_count) == ("535.161.08", 8, 8)
    assert [gpu.pci_bus_id[-7:] for gpu in log.gpus] == [
        "19:00.0", "3B:00.0", "4C:00.0", "5D:00.0", "9B:00.0", "BB:00.0", "CB:00.0", "DB:00.0",
    ]  # fmt: skip
    assert len({gpu.serial for gpu in log.gpus}) == 8
    gpu = log.gpus[0]
    assert gpu.module_id == 2 and gpu.reset_required is False
    assert (gpu.fabric_state, gpu.fabric_status) == ("Completed", "Success")
    # SRAM parity + SEC-DED + DRAM counters summed; the threshold flag is not a count.
    assert gpu.ecc_errors.aggregate_uncorrectable == 0
    assert gpu.remapped_rows == parse_text(H100_DRV590.read_text()).gpus[0].remapped_rows
    assert gpu.active_clock_event_reasons == ["hw_slowdown", "hw_power_brake_slowdown"]
    # T.Limit offsets (-8 C, -2 C) are not thresholds: left out rather than misread.
    assert (gpu.temperature.shutdown_c, gpu.temperature.slowdown_c) == (None, None)
    assert gpu.power.draw_w == pytest.approx(67.74)


def test_driver_590_layout():
    """590: Platform Info holds the module id, Average/Instantaneous power draw."""
    gpu = parse_text(H100_DRV590.read_text()).gpus[0]
    assert gpu.module_id == 7
    assert gpu.power.draw_w == pytest.approx(69.85)
    assert gpu.clocks.applications_graphics_mhz is None  # "Requested functionality deprecated"
    assert gpu.reset_required is None  # 590 prints GPU Recovery Action instead


def test_volta_single_and_double_bit_blocks_with_ecc_off():
    gpu = parse_text(TITAN_V.read_text()).gpus[0]
    assert gpu.product_architecture == "Volta"
    assert gpu.ecc_mode_current is None
    assert asdict(gpu.ecc_errors) == dict.fromkeys(asdict(gpu.ecc_errors))
    assert asdict(gpu.remapped_rows) == dict.fromkeys(asdict(gpu.remapped_rows))
    assert gpu.temperature.shutdown_c == 100 and gpu.temperature.slowdown_c == 97


def test_single_and_double_bit_totals_are_read_where_counted():
    """The Volta layout with counts (the TITAN V capture with its Totals set, as ECC-on GPUs
    print them): the Double Bit Total is the uncorrectable count."""
    text = TITAN_V.read_text().replace(
        "            Double Bit\n"
        + "".join(
            f"                {name:<26}: N/A\n"
            for name in (
                "Device Memory",
                "Register File",
                "L1 Cache",
                "L2 Cache",
                "Texture Memory",
                "Texture Shared",
                "CBU",
            )
        )  # fmt: skip
        + "                Total                     : N/A\n",
        "            Double Bit\n                Total                     : 3\n",
        1,
    )
    assert parse_text(text).gpus[0].ecc_errors.volatile_uncorrectable == 3


def test_diagnostic_lines_are_skipped_with_their_line_number():
    lines = A10_PENDING.read_text().splitlines()
    lines.insert(1, "WARNING: infoROM is corrupted at gpu 0000:07:00.0")
    warnings: list[str] = []
    log = parse_text("\n".join(lines), warnings)
    assert warnings == [
        "nvidia-smi -q: skipped line 2: 'WARNING: infoROM is corrupted at gpu 0000:07:00.0'"
    ]
    assert log.gpus[0].remapped_rows.pending is True


def test_output_with_nothing_usable_is_an_error():
    with pytest.raises(ParseError, match="nvidia-smi -q: .*NVIDIA-SMI has failed"):
        parse_text(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n"
        )
    with pytest.raises(ParseError, match="No devices were found"):
        parse_text("No devices were found\n")
