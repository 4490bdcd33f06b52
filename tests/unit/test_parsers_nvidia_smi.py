"""nvidia-smi -q -x, --query-gpu CSV and nvlink --status against recorded real outputs."""

from pathlib import Path

import pytest

from captures import real_captures, shared_capture
from kiln.parsers import ParseError
from kiln.parsers.nvidia_smi import Gpu, RemappedRows, RetiredPages, parse_xml
from kiln.parsers.nvidia_smi_nvlink import NvlinkState, parse_nvlink_status
from kiln.parsers.nvidia_smi_query import parse_query_gpu_csv

FIXTURES = Path(__file__).parent.parent / "fixtures"
REAL_XML = FIXTURES / "real/nvidia-smi-q-x"
A100_XML = shared_capture("nvidia-smi-q-x/a100_sxm4_80gb_mig_telegraf.xml")
T4_XML = REAL_XML / "tesla_t4_telegraf.xml"
V100S_8GPU_XML = REAL_XML / "tesla_v100s_pcie_32gb_8gpu_datakit.xml"
A100_FAULTY_XML = FIXTURES / "derived/nvidia-smi-q-x/a100_sxm4_80gb_faulty_ecc_thermal.xml"
H100_CSV = shared_capture("nvidia-smi-query-gpu-csv/h100_80gb_hbm3_allfields_idle.csv")
NVLINK = FIXTURES / "real/nvidia-smi-nvlink"
H100_PCIE_NVLINK = NVLINK / "h100_pcie_2gpu_nvlink_bridge_hpe.txt"
V100_BAD_NVLINK = NVLINK / "v100_sxm2_7gpu_inactive_links_azhpc.txt"


def _memory_fault(gpu: Gpu) -> list[str]:
    """What in the model says a GPU's memory needs attention (how kiln judges it)."""
    faults = []
    if gpu.ecc_errors.volatile_uncorrectable or gpu.ecc_errors.aggregate_uncorrectable:
        faults.append("uncorrectable ECC")
    if gpu.retired_pages.pending or gpu.retired_pages.double_bit:
        faults.append("retired pages")
    if gpu.remapped_rows.pending or gpu.remapped_rows.failure or gpu.remapped_rows.uncorrectable:
        faults.append("row remapping")
    if gpu.reset_required:
        faults.append("reset required")
    return faults


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


def test_xml_faulty_derived_is_judged_faulty() -> None:
    gpu = parse_xml(A100_FAULTY_XML.read_text()).gpus[0]
    assert _memory_fault(gpu) == ["uncorrectable ECC", "reset required"]


@pytest.mark.parametrize("path", real_captures("nvidia-smi-q-x", "*.xml"), ids=lambda p: p.name)
def test_xml_real_samples_are_healthy(path: Path) -> None:
    # None of the public real captures shows a memory fault; each GPU must read as healthy.
    log = parse_xml(path.read_text())
    assert log.gpu_count >= 1
    for gpu in log.gpus:
        assert gpu.ecc_mode_current is True
        assert _memory_fault(gpu) == []


def test_xml_v100s_8gpu_header_and_identity() -> None:
    log = parse_xml(V100S_8GPU_XML.read_text())
    assert log.timestamp == "Thu Sep 15 13:55:33 2022"
    assert (log.driver_version, log.cuda_version) == ("460.73.01", "11.2")
    assert log.attached_gpus == log.gpu_count == 8
    assert {g.product_name for g in log.gpus} == {"Tesla V100S-PCIE-32GB"}
    assert [g.index for g in log.gpus] == list(range(8))
    assert [g.pci_bus_id for g in log.gpus] == [
        f"00000000:00:{dev}.0" for dev in ("0D", "0E", "0F", "10", "11", "12", "13", "14")
    ]
    assert [g.serial for g in log.gpus] == [
        "1562920006088",
        "1562920005886",
        "1563320001045",
        "1562920007325",
        "1562920005822",
        "1562920005539",
        "1562920007403",
        "1562920006372",
    ]
    assert [g.uuid for g in log.gpus] == [
        "GPU-76098dc1-d3bc-9a1b-7ea6-f7b48837829e",
        "GPU-bbf7a241-bf9a-eb90-b2fb-d213294faf48",
        "GPU-8f75e71c-23dd-a060-d997-4caf592954db",
        "GPU-3181eb56-505c-8214-ba05-c132f68f89b8",
        "GPU-2aa87d54-d4ff-2900-812b-1a4b7e119583",
        "GPU-39c3a168-9034-0b5a-223a-1042f30a9242",
        "GPU-d2446f91-171e-1b54-515d-9d9b03484ddf",
        "GPU-1d955959-c95b-4f40-2cac-100d3006ffe2",
    ]
    gpu = log.gpus[0]
    # Driver 460 (DTD v11) has no product_architecture, gpu_module_id, fabric or reset status.
    assert gpu.product_architecture is None
    assert gpu.module_id is None
    assert gpu.fabric_state is None and gpu.fabric_status is None
    assert gpu.reset_required is None
    assert gpu.board_part_number is None
    assert gpu.vbios_version == "88.00.98.00.01"
    assert gpu.memory_total_mib == 32510
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (3, 3)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
    assert not gpu.mig_mode_current and gpu.mig_device_count == 0


def test_xml_v100s_8gpu_modes_power_ecc() -> None:
    gpus = parse_xml(V100S_8GPU_XML.read_text()).gpus
    for gpu in gpus:
        assert gpu.persistence_mode is False
        assert (gpu.ecc_mode_current, gpu.ecc_mode_pending) == (True, True)
        power = gpu.power
        # Old <power_readings>: <power_limit> and <enforced_power_limit>, no requested limit.
        assert (power.current_limit_w, power.enforced_limit_w) == (250.0, 250.0)
        assert (power.default_limit_w, power.min_limit_w, power.max_limit_w) == (
            250.0,
            100.0,
            250.0,
        )
        assert power.requested_limit_w is None
        # Old single_bit/double_bit ECC totals.
        ecc = gpu.ecc_errors
        assert (ecc.volatile_correctable, ecc.volatile_uncorrectable) == (0, 0)
        assert (ecc.aggregate_correctable, ecc.aggregate_uncorrectable) == (0, 0)
        assert (gpu.retired_pages.single_bit, gpu.retired_pages.double_bit) == (0, 0)
        assert gpu.retired_pages.pending is False
        # V100 retires pages; <remapped_rows>N/A</remapped_rows>.
        assert gpu.remapped_rows == RemappedRows(None, None, None, None)
        assert (gpu.temperature.slowdown_c, gpu.temperature.shutdown_c) == (87, 90)
        assert gpu.temperature.max_operating_c == 83
        assert gpu.clocks.max_sm_mhz == 1597
    assert [g.power.draw_w for g in gpus] == [
        232.8,
        152.03,
        67.57,
        198.41,
        117.99,
        85.8,
        68.14,
        61.47,
    ]
    assert [g.temperature.gpu_c for g in gpus] == [66, 58, 57, 61, 59, 64, 61, 57]
    assert [g.temperature.memory_c for g in gpus] == [63, 56, 55, 59, 58, 62, 56, 53]
    # Two of the eight GPUs were held at the power cap when the snapshot was taken.
    capped = [g.index for g in gpus if g.active_clock_event_reasons == ["sw_power_cap"]]
    assert capped == [3, 6]
    assert all(g.active_clock_event_reasons == [] for g in gpus if g.index not in capped)


def test_xml_t4() -> None:
    log = parse_xml(T4_XML.read_text())
    assert (log.driver_version, log.cuda_version) == ("515.105.01", "11.7")
    assert log.attached_gpus == log.gpu_count == 1
    gpu = log.gpus[0]
    assert gpu.product_name == "Tesla T4"
    assert gpu.product_architecture == "Turing"
    assert gpu.pci_bus_id == "00000000:00:1E.0"
    assert gpu.serial == "0000000000000"
    assert gpu.uuid == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
    assert gpu.module_id == 0
    assert gpu.persistence_mode is False
    assert (gpu.ecc_mode_current, gpu.ecc_mode_pending) == (True, True)
    # sram/dram counters without the parity/secded split.
    ecc = gpu.ecc_errors
    assert (ecc.volatile_correctable, ecc.volatile_uncorrectable) == (0, 0)
    assert (ecc.aggregate_correctable, ecc.aggregate_uncorrectable) == (0, 0)
    assert gpu.retired_pages == RetiredPages(single_bit=0, double_bit=0, pending=False)
    assert gpu.remapped_rows.failure is None
    power = gpu.power
    assert power.draw_w == pytest.approx(26.78)
    assert (power.current_limit_w, power.enforced_limit_w, power.default_limit_w) == (70.0,) * 3
    assert (power.min_limit_w, power.max_limit_w) == (60.0, 70.0)
    assert power.requested_limit_w is None
    assert gpu.memory_total_mib == 15360
    # The card trained at x8 in a x16 slot: both widths are reported.
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (8, 16)
    assert (gpu.temperature.gpu_c, gpu.temperature.slowdown_c, gpu.temperature.shutdown_c) == (
        40,
        93,
        96,
    )
    assert gpu.fabric_state is None
    assert gpu.active_clock_event_reasons == []


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


def test_nvlink_h100_pcie_bridge() -> None:
    status = parse_nvlink_status(H100_PCIE_NVLINK.read_text())
    assert sorted(status) == [0, 1]
    for links in status.values():
        assert [state.link for state in links] == list(range(18))
        inactive = [state.link for state in links if not state.active]
        # NVLink bridges join 12 of the 18 links of a PCIe H100 (topo -m: NV12).
        assert inactive == [4, 5, 10, 11, 16, 17]
        assert {state.speed_gbs for state in links if state.active} == {26.562}
    assert status[0][0] == NvlinkState(link=0, active=True, speed_gbs=26.562)
    assert status[0][4] == NvlinkState(link=4, active=False, speed_gbs=None)


def test_nvlink_v100_missing_gpu_and_dead_links() -> None:
    status = parse_nvlink_status(V100_BAD_NVLINK.read_text())
    # An 8-GPU node: GPU 7 is not listed at all, and its six peers' link ends are down.
    assert sorted(set(range(8)) - status.keys()) == [7]
    assert {gpu: len(links) for gpu, links in status.items()} == dict.fromkeys(range(7), 6)
    inactive = {
        gpu: [state.link for state in links if not state.active]
        for gpu, links in status.items()
        if any(not state.active for state in links)
    }
    assert inactive == {3: [3, 5], 4: [1], 5: [0, 4], 6: [1]}
    speeds = {state.speed_gbs for links in status.values() for state in links}
    assert speeds == {25.781, None}


def test_nvlink_all_links_down_message() -> None:
    # No real capture of this case was found. The sentence is the one nvidia-smi prints when a
    # GPU has no active NVLink, as quoted in leptonai/gpud's nvlink component; the GPU header
    # and the indent around it are assumed. The GPU is listed with no links.
    text = (
        "GPU 0: NVIDIA H100 PCIe (UUID: GPU-6968dfc2-d444-d92c-c36b-6abe53445cb9)\n"
        "\t Unable to retrieve NVLink information as all links are inActive\n"
    )
    assert parse_nvlink_status(text) == {0: []}


def test_nvlink_unknown_line_names_line() -> None:
    lines = H100_PCIE_NVLINK.read_text().splitlines()
    lines[3] = lines[3].replace("GB/s", "GT/s")
    with pytest.raises(ParseError) as info:
        parse_nvlink_status("\n".join(lines))
    assert info.value.tool == "nvidia-smi nvlink --status"
    assert info.value.line_no == 4
    assert "not a link line" in str(info.value)


def test_nvlink_link_before_gpu() -> None:
    lines = V100_BAD_NVLINK.read_text().splitlines()
    with pytest.raises(ParseError, match="before any 'GPU n:' line") as info:
        parse_nvlink_status("\n".join(lines[1:]))
    assert info.value.line_no == 1


def test_nvlink_duplicate_gpu_and_empty() -> None:
    text = H100_PCIE_NVLINK.read_text().replace("GPU 1:", "GPU 0:")
    with pytest.raises(ParseError, match="GPU 0 listed twice") as info:
        parse_nvlink_status(text)
    assert info.value.line_no == 20
    with pytest.raises(ParseError, match="no 'GPU n:' line"):
        parse_nvlink_status("\n")


@pytest.mark.parametrize(
    ("capture", "gpus", "domain"),
    [
        # GB200 and GB300 trays (NVL72): every GPU registered in one NVLink domain of the rack.
        ("gb200_4gpu_p6e_arm64_fabric_completed_clique2_k8stestinfra.xml", 4,
         "00000001-0000-0000-0000-000000000001.2"),
        ("gb300_4gpu_fabric_completed_clique32766_k8stestinfra.xml", 4, "32766"),
        # HGX B200: a single-node NVSwitch fabric (clique 0, the all-zero ClusterUUID).
        ("b200_8gpu_fabric_completed_clique0_k8stestinfra.xml", 8, None),
    ],
)  # fmt: skip
def test_blackwell_gpus_name_their_nvlink_domain(capture, gpus, domain):
    log = parse_xml(shared_capture(f"nvidia-smi-q-x/{capture}").read_text())
    assert len(log.gpus) == gpus
    assert {(g.fabric_state, g.fabric_status) for g in log.gpus} == {("Completed", "Success")}
    domains = {gpu.nvlink_domain for gpu in log.gpus}
    assert len(domains) == 1  # one domain per tray or server
    (found,) = domains
    if domain is None:
        assert found is None
        assert {(g.fabric_clique_id, g.fabric_cluster_uuid) for g in log.gpus} == {
            (0, "00000000-0000-0000-0000-000000000000")
        }
    else:
        assert found is not None and found.endswith(domain)


def test_a_gpu_reporting_no_fabric_identity_has_no_domain():
    log = parse_xml(A100_XML.read_text())  # A100: no <cliqueId>/<clusterUuid> at all
    assert [gpu.nvlink_domain for gpu in log.gpus] == [None]
