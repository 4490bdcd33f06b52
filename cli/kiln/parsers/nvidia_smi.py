"""`nvidia-smi -q -x` (XML).

The XML schema changed over driver branches (nvsmi_device_v10..v12 and later): clock "throttle"
reasons became "event" reasons, `power_readings` became `gpu_power_readings` (and lost
`enforced_power_limit`), ECC counters moved from single/double-bit totals to SRAM/DRAM counts.
This parser reads all of those spellings into one model. Placeholders ("N/A", "[Not Supported]",
"Requested functionality has been deprecated") become None.

Per-link NVLink state is not part of `nvidia-smi -q -x`; what the XML carries is the NVSwitch
fabric registration (`<fabric><state>`/`<status>`), which is read into `Gpu.fabric_state`. The
links themselves come from `nvidia-smi nvlink --status` (`-s`), read by
`kiln.parsers.nvidia_smi_nvlink`; `--query-gpu` CSV is read by `kiln.parsers.nvidia_smi_query`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from kiln.parsers import ParseError
from kiln.parsers._common import clean, flag, integer, number

TOOL_XML = "nvidia-smi -q -x"


@dataclass(frozen=True, slots=True)
class PowerReadings:
    """Watts. `enforced_w` is only in older XML and in `--query-gpu=enforced.power.limit`."""

    draw_w: float | None
    current_limit_w: float | None
    requested_limit_w: float | None
    default_limit_w: float | None
    min_limit_w: float | None
    max_limit_w: float | None
    enforced_limit_w: float | None


@dataclass(frozen=True, slots=True)
class EccErrors:
    """ECC counts summed over memory kinds (SRAM + DRAM, or the older single/double-bit totals)."""

    volatile_correctable: int | None
    volatile_uncorrectable: int | None
    aggregate_correctable: int | None
    aggregate_uncorrectable: int | None


@dataclass(frozen=True, slots=True)
class RetiredPages:
    """Page retirement (pre-Ampere); all None where the GPU uses row remapping instead."""

    single_bit: int | None
    double_bit: int | None
    pending: bool | None


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """Row remapping (Ampere and later); None fields where the GPU does not report it."""

    correctable: int | None
    uncorrectable: int | None
    pending: bool | None
    failure: bool | None


@dataclass(frozen=True, slots=True)
class Clocks:
    """MHz."""

    graphics_mhz: int | None
    sm_mhz: int | None
    memory_mhz: int | None
    video_mhz: int | None
    max_graphics_mhz: int | None
    max_sm_mhz: int | None
    max_memory_mhz: int | None
    applications_graphics_mhz: int | None
    applications_memory_mhz: int | None


@dataclass(frozen=True, slots=True)
class Temperatures:
    """Degrees C."""

    gpu_c: int | None
    memory_c: int | None
    slowdown_c: int | None
    shutdown_c: int | None
    max_operating_c: int | None


@dataclass(frozen=True, slots=True)
class Gpu:
    """One `<gpu>` element."""

    index: int
    pci_bus_id: str
    product_name: str | None
    product_architecture: str | None
    serial: str | None
    uuid: str | None
    board_part_number: str | None
    vbios_version: str | None
    module_id: int | None
    persistence_mode: bool | None
    mig_mode_current: bool | None
    mig_mode_pending: bool | None
    mig_device_count: int
    ecc_mode_current: bool | None
    ecc_mode_pending: bool | None
    ecc_errors: EccErrors
    retired_pages: RetiredPages
    remapped_rows: RemappedRows
    power: PowerReadings
    clocks: Clocks
    temperature: Temperatures
    performance_state: str | None
    # Reason name without prefix ("sw_power_cap", "hw_thermal_slowdown", ...) -> active?
    clock_event_reasons: dict[str, bool]
    memory_total_mib: int | None
    pcie_gen_current: int | None
    pcie_gen_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None
    fabric_state: str | None
    fabric_status: str | None
    reset_required: bool | None
    # The NVLink domain the GPU registered in (GB200/GB300 NVL72 racks: one ClusterUUID per
    # rack's fabric, one CliqueId per partition of it); None where not reported.
    fabric_clique_id: int | None = None
    fabric_cluster_uuid: str | None = None

    @property
    def nvlink_domain(self) -> str | None:
        """ "<ClusterUUID>.<CliqueId>" of a multi-node NVLink domain (what Slurm's topology/block
        groups by); None on a single-node NVSwitch fabric (HGX B200/H100 report the all-zero
        ClusterUUID) and where the driver reports none."""
        uuid = self.fabric_cluster_uuid
        if uuid is None or self.fabric_clique_id is None or not uuid.strip("0-"):
            return None
        return f"{uuid}.{self.fabric_clique_id}"

    @property
    def active_clock_event_reasons(self) -> list[str]:
        """The reasons currently holding clocks down, e.g. ["sw_power_cap"]."""
        return [name for name, active in self.clock_event_reasons.items() if active]


@dataclass(frozen=True, slots=True)
class NvidiaSmiLog:
    """A whole `nvidia-smi -q -x` document.

    `attached_gpus` is what the header says; `gpus` is what the document holds. They differ when a
    GPU fell off the bus mid-query or the output was trimmed: compare them, do not assume.
    """

    timestamp: str | None
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    gpus: tuple[Gpu, ...]

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)


def _text(elem: ET.Element | None, path: str) -> str | None:
    if elem is None:
        return None
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    return found.text


def _first(elem: ET.Element, *paths: str) -> str | None:
    """The first of several spellings that holds a real value."""
    for path in paths:
        value = _text(elem, path)
        if clean(value) is not None:
            return value
    return None


def _int(elem: ET.Element | None, path: str) -> int | None:
    return integer(_text(elem, path))


def _sum_counts(elem: ET.Element | None, *, uncorrectable: bool) -> int | None:
    """Sum one direction of ECC counters under <volatile> or <aggregate>, in any schema."""
    if elem is None:
        return None
    old_style = elem.find("double_bit" if uncorrectable else "single_bit")
    if old_style is not None:
        return _int(old_style, "total")
    total: int | None = None
    for child in elem:
        tag = child.tag
        if "threshold" in tag:
            continue
        is_unc = "uncorrectable" in tag
        if is_unc != uncorrectable or not (is_unc or tag.endswith("_correctable")):
            continue
        value = integer(child.text)
        if value is not None:
            total = (total or 0) + value
    return total


def _power(gpu: ET.Element) -> PowerReadings:
    readings = gpu.find("gpu_power_readings")
    if readings is None:
        readings = gpu.find("power_readings")
    if readings is None:
        return PowerReadings(None, None, None, None, None, None, None)
    return PowerReadings(
        draw_w=number(_first(readings, "power_draw", "average_power_draw", "instant_power_draw")),
        current_limit_w=number(_first(readings, "current_power_limit", "power_limit")),
        requested_limit_w=number(_text(readings, "requested_power_limit")),
        default_limit_w=number(_text(readings, "default_power_limit")),
        min_limit_w=number(_text(readings, "min_power_limit")),
        max_limit_w=number(_text(readings, "max_power_limit")),
        enforced_limit_w=number(_text(readings, "enforced_power_limit")),
    )


def _remapped_rows(gpu: ET.Element) -> RemappedRows:
    rows = gpu.find("remapped_rows")
    return RemappedRows(
        correctable=_int(rows, "remapped_row_corr"),
        uncorrectable=_int(rows, "remapped_row_unc"),
        pending=flag(_text(rows, "remapped_row_pending")),
        failure=flag(_text(rows, "remapped_row_failure")),
    )


def _retired_pages(gpu: ET.Element) -> RetiredPages:
    pages = gpu.find("retired_pages")
    return RetiredPages(
        single_bit=_int(pages, "multiple_single_bit_retirement/retired_count"),
        double_bit=_int(pages, "double_bit_retirement/retired_count"),
        pending=flag(_first(pages, "pending_retirement", "pending_blacklist"))
        if pages is not None
        else None,
    )


def _clock_reasons(gpu: ET.Element) -> dict[str, bool]:
    reasons: dict[str, bool] = {}
    for block, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
        ("clocks_throttle_reasons", "clocks_event_reason_"),
    ):
        elem = gpu.find(block)
        if elem is None:
            continue
        for child in elem:
            if not child.tag.startswith(prefix):
                continue
            active = flag(child.text)
            if active is not None:
                reasons[child.tag[len(prefix) :]] = active
    return reasons


def _gpu(index: int, elem: ET.Element) -> Gpu:
    ecc = elem.find("ecc_errors")
    volatile = ecc.find("volatile") if ecc is not None else None
    aggregate = ecc.find("aggregate") if ecc is not None else None
    temp = elem.find("temperature")
    link = elem.find("pci/pci_gpu_link_info")
    return Gpu(
        index=index,
        pci_bus_id=elem.get("id") or _text(elem, "pci/pci_bus_id") or "",
        product_name=clean(_text(elem, "product_name")),
        product_architecture=clean(_text(elem, "product_architecture")),
        serial=clean(_text(elem, "serial")),
        uuid=clean(_text(elem, "uuid")),
        board_part_number=clean(_text(elem, "board_part_number")),
        vbios_version=clean(_text(elem, "vbios_version")),
        module_id=integer(_first(elem, "gpu_module_id", "platformInfo/module_id")),
        persistence_mode=flag(_text(elem, "persistence_mode")),
        mig_mode_current=flag(_text(elem, "mig_mode/current_mig")),
        mig_mode_pending=flag(_text(elem, "mig_mode/pending_mig")),
        mig_device_count=len(elem.findall("mig_devices/mig_device")),
        ecc_mode_current=flag(_text(elem, "ecc_mode/current_ecc")),
        ecc_mode_pending=flag(_text(elem, "ecc_mode/pending_ecc")),
        ecc_errors=EccErrors(
            volatile_correctable=_sum_counts(volatile, uncorrectable=False),
            volatile_uncorrectable=_sum_counts(volatile, uncorrectable=True),
            aggregate_correctable=_sum_counts(aggregate, uncorrectable=False),
            aggregate_uncorrectable=_sum_counts(aggregate, uncorrectable=True),
        ),
        retired_pages=_retired_pages(elem),
        remapped_rows=_remapped_rows(elem),
        power=_power(elem),
        clocks=Clocks(
            graphics_mhz=_int(elem, "clocks/graphics_clock"),
            sm_mhz=_int(elem, "clocks/sm_clock"),
            memory_mhz=_int(elem, "clocks/mem_clock"),
            video_mhz=_int(elem, "clocks/video_clock"),
            max_graphics_mhz=_int(elem, "max_clocks/graphics_clock"),
            max_sm_mhz=_int(elem, "max_clocks/sm_clock"),
            max_memory_mhz=_int(elem, "max_clocks/mem_clock"),
            applications_graphics_mhz=_int(elem, "applications_clocks/graphics_clock"),
            applications_memory_mhz=_int(elem, "applications_clocks/mem_clock"),
        ),
        temperature=Temperatures(
            gpu_c=_int(temp, "gpu_temp"),
            memory_c=_int(temp, "memory_temp"),
            slowdown_c=_int(temp, "gpu_temp_slow_threshold"),
            shutdown_c=_int(temp, "gpu_temp_max_threshold"),
            max_operating_c=_int(temp, "gpu_temp_max_gpu_threshold"),
        ),
        performance_state=clean(_text(elem, "performance_state")),
        clock_event_reasons=_clock_reasons(elem),
        memory_total_mib=_int(elem, "fb_memory_usage/total"),
        pcie_gen_current=_int(link, "pcie_gen/current_link_gen"),
        pcie_gen_max=_int(link, "pcie_gen/max_link_gen"),
        pcie_width_current=_int(link, "link_widths/current_link_width"),
        pcie_width_max=_int(link, "link_widths/max_link_width"),
        fabric_state=clean(_text(elem, "fabric/state")),
        fabric_status=clean(_text(elem, "fabric/status")),
        reset_required=flag(_text(elem, "gpu_reset_status/reset_required")),
        fabric_clique_id=_int(elem, "fabric/cliqueId"),
        fabric_cluster_uuid=clean(_text(elem, "fabric/clusterUuid")),
    )


def parse_xml(text: str) -> NvidiaSmiLog:
    """Parse `nvidia-smi -q -x` output."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line_no, _col = exc.position
        lines = text.splitlines()
        line = lines[line_no - 1] if 0 < line_no <= len(lines) else None
        raise ParseError(
            TOOL_XML, f"not well-formed XML ({exc})", line_no=line_no, line=line
        ) from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(TOOL_XML, f"root element is <{root.tag}>, expected <nvidia_smi_log>")
    gpus = tuple(_gpu(i, elem) for i, elem in enumerate(root.findall("gpu")))
    return NvidiaSmiLog(
        timestamp=clean(_text(root, "timestamp")),
        driver_version=clean(_text(root, "driver_version")),
        cuda_version=clean(_text(root, "cuda_version")),
        attached_gpus=integer(_text(root, "attached_gpus")),
        gpus=gpus,
    )
