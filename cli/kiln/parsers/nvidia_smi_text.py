"""Plain-text `nvidia-smi -q`, read into the same model as the XML (`kiln.parsers.nvidia_smi`).

kiln reads `nvidia-smi -q -x` where it can; this reader is for nodes and captures where the XML is
not available (a driver or vGPU build whose `-x` fails, a capture someone pasted into a ticket).
It returns `NvidiaSmiLog`/`Gpu`, so every verdict written for the XML judges it unchanged.

The text is an indented tree: "Key : value" lines and section titles, four spaces a level, one
`GPU 00000000:19:00.0` block per GPU. Field names moved between driver branches the same way as
the XML tags: "Clocks Throttle Reasons" became "Clocks Event Reasons", "Power Readings" became
"GPU Power Readings", ECC counters went from Single/Double Bit blocks (with a Total) to SRAM/DRAM
counts, and the thresholds became T.Limit offsets (those are not absolute temperatures and are
left out). Placeholders ("N/A", "[Not Supported]") become None.

Lines a tool printed around the log (`WARNING: infoROM is corrupted at gpu ...`) are skipped and
named in `warnings` with their line number; output with no GPU and no header is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kiln.parsers import ParseError
from kiln.parsers._common import clean, flag, integer, number
from kiln.parsers.nvidia_smi import (
    Clocks,
    EccErrors,
    Gpu,
    NvidiaSmiLog,
    PowerReadings,
    RemappedRows,
    RetiredPages,
    Temperatures,
)

TOOL_TEXT = "nvidia-smi -q"

_GPU_HEADER = re.compile(
    r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$"
)
_KEY_VALUE = re.compile(r"^(?P<key>[^:]*?)\s*:(?:\s(?P<value>.*))?$")
_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
# What nvidia-smi and the shell print instead of (or around) a log: never part of the tree.
_DIAGNOSTIC = re.compile(r"^(warning|error|failed|unable|nvidia-smi has failed|no devices)", re.I)

# "Clocks Event Reasons" labels -> the XML's reason names (`Gpu.clock_event_reasons` keys).
_REASON_NAMES = {"idle": "gpu_idle", "display clock setting": "display_clocks_setting"}


@dataclass(slots=True)
class _Node:
    key: str
    value: str | None
    line_no: int
    children: list[_Node] = field(default_factory=list)

    def find(self, *path: str) -> _Node | None:
        node: _Node | None = self
        for part in path:
            wanted = part.lower()
            node = (
                next((c for c in node.children if c.key.lower() == wanted), None) if node else None
            )
        return node

    def get(self, *path: str) -> str | None:
        node = self.find(*path)
        return node.value if node is not None else None


def _first(section: _Node, *keys: str) -> str | None:
    """The first of several spellings that holds a real value."""
    for key in keys:
        value = section.get(key)
        if clean(value) is not None:
            return value
    return None


def _tree(text: str, warnings: list[str]) -> tuple[_Node, list[_Node]]:
    """The header (top-level keys) and one node per GPU block."""
    header = _Node("", None, 0)
    gpus: list[_Node] = []
    stack: list[tuple[int, _Node]] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip() or _BANNER.match(line.strip()):
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        gpu = _GPU_HEADER.match(line)
        if gpu:
            node = _Node("GPU", gpu.group("bus"), line_no)
            gpus.append(node)
            stack = [(0, node)]
            continue
        if indent == 0 and _DIAGNOSTIC.match(body):
            warnings.append(f"{TOOL_TEXT}: skipped line {line_no}: {body[:120]!r}")
            continue
        match = _KEY_VALUE.match(body)
        key, value = (match.group("key"), match.group("value")) if match else (body, None)
        node = _Node(key.strip(), value.strip() if value is not None else None, line_no)
        if indent == 0:
            stack = []
            header.children.append(node)
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not stack:
            warnings.append(f"{TOOL_TEXT}: skipped line {line_no} outside any GPU: {body[:120]!r}")
            continue
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return header, gpus


def _sum_counts(section: _Node | None, *, uncorrectable: bool) -> int | None:
    """One direction of the ECC counters under Volatile or Aggregate, in either layout."""
    if section is None:
        return None
    old_style = section.find("Double Bit" if uncorrectable else "Single Bit")
    if old_style is not None:
        return integer(old_style.get("Total"))
    total: int | None = None
    for child in section.children:
        key = child.key.lower()
        if "threshold" in key or child.children:
            continue
        is_unc = "uncorrectable" in key
        if is_unc != uncorrectable or not (is_unc or key.endswith("correctable")):
            continue
        value = integer(child.value)
        if value is not None:
            total = (total or 0) + value
    return total


def _reasons(gpu: _Node) -> dict[str, bool]:
    section = gpu.find("Clocks Event Reasons") or gpu.find("Clocks Throttle Reasons")
    reasons: dict[str, bool] = {}
    pending = list(section.children) if section is not None else []
    while pending:
        child = pending.pop(0)
        pending[:0] = child.children  # "HW Thermal Slowdown" sits under "HW Slowdown"
        active = flag(child.value)
        if active is not None:
            label = child.key.lower()
            reasons[_REASON_NAMES.get(label, label.replace(" ", "_"))] = active
    return reasons


def _power(gpu: _Node) -> PowerReadings:
    section = gpu.find("GPU Power Readings") or gpu.find("Power Readings")
    if section is None:
        return PowerReadings(None, None, None, None, None, None, None)
    return PowerReadings(
        draw_w=number(
            _first(section, "Power Draw", "Average Power Draw", "Instantaneous Power Draw")
        ),
        current_limit_w=number(_first(section, "Current Power Limit", "Power Limit")),
        requested_limit_w=number(section.get("Requested Power Limit")),
        default_limit_w=number(section.get("Default Power Limit")),
        min_limit_w=number(section.get("Min Power Limit")),
        max_limit_w=number(section.get("Max Power Limit")),
        enforced_limit_w=number(section.get("Enforced Power Limit")),
    )


def _retired_pages(gpu: _Node) -> RetiredPages:
    section = gpu.find("Retired Pages")
    if section is None:
        return RetiredPages(None, None, None)
    return RetiredPages(
        single_bit=integer(section.get("Single Bit ECC")),
        double_bit=integer(section.get("Double Bit ECC")),
        pending=flag(
            _first(section, "Pending Page Blacklist", "Pending Page Retirement", "Pending")
        ),
    )


def _remapped_rows(gpu: _Node) -> RemappedRows:
    section = gpu.find("Remapped Rows")
    if section is None or not section.children:  # "Remapped Rows : N/A" before Ampere
        return RemappedRows(None, None, None, None)
    return RemappedRows(
        correctable=integer(section.get("Correctable Error")),
        uncorrectable=integer(section.get("Uncorrectable Error")),
        pending=flag(section.get("Pending")),
        failure=flag(section.get("Remapping Failure Occurred")),
    )


def _mhz(gpu: _Node, section: str, key: str) -> int | None:
    return integer(gpu.get(section, key))


def _gpu(index: int, gpu: _Node) -> Gpu:
    ecc = gpu.find("ECC Errors")
    volatile = ecc.find("Volatile") if ecc is not None else None
    aggregate = ecc.find("Aggregate") if ecc is not None else None
    link = gpu.find("PCI", "GPU Link Info")
    mig = gpu.find("MIG devices")
    return Gpu(
        index=index,
        pci_bus_id=gpu.value or gpu.get("PCI", "Bus Id") or "",
        product_name=clean(gpu.get("Product Name")),
        product_architecture=clean(gpu.get("Product Architecture")),
        serial=clean(gpu.get("Serial Number")),
        uuid=clean(gpu.get("GPU UUID")),
        board_part_number=clean(gpu.get("Board Part Number")),
        vbios_version=clean(gpu.get("VBIOS Version")),
        module_id=integer(gpu.get("Module ID") or gpu.get("Platform Info", "Module Id")),
        persistence_mode=flag(gpu.get("Persistence Mode")),
        mig_mode_current=flag(gpu.get("MIG Mode", "Current")),
        mig_mode_pending=flag(gpu.get("MIG Mode", "Pending")),
        mig_device_count=0 if mig is None else sum(c.key == "MIG Device" for c in mig.children),
        ecc_mode_current=flag(gpu.get("ECC Mode", "Current")),
        ecc_mode_pending=flag(gpu.get("ECC Mode", "Pending")),
        ecc_errors=EccErrors(
            volatile_correctable=_sum_counts(volatile, uncorrectable=False),
            volatile_uncorrectable=_sum_counts(volatile, uncorrectable=True),
            aggregate_correctable=_sum_counts(aggregate, uncorrectable=False),
            aggregate_uncorrectable=_sum_counts(aggregate, uncorrectable=True),
        ),
        retired_pages=_retired_pages(gpu),
        remapped_rows=_remapped_rows(gpu),
        power=_power(gpu),
        clocks=Clocks(
            graphics_mhz=_mhz(gpu, "Clocks", "Graphics"),
            sm_mhz=_mhz(gpu, "Clocks", "SM"),
            memory_mhz=_mhz(gpu, "Clocks", "Memory"),
            video_mhz=_mhz(gpu, "Clocks", "Video"),
            max_graphics_mhz=_mhz(gpu, "Max Clocks", "Graphics"),
            max_sm_mhz=_mhz(gpu, "Max Clocks", "SM"),
            max_memory_mhz=_mhz(gpu, "Max Clocks", "Memory"),
            applications_graphics_mhz=_mhz(gpu, "Applications Clocks", "Graphics"),
            applications_memory_mhz=_mhz(gpu, "Applications Clocks", "Memory"),
        ),
        temperature=Temperatures(
            gpu_c=integer(gpu.get("Temperature", "GPU Current Temp")),
            memory_c=integer(gpu.get("Temperature", "Memory Current Temp")),
            slowdown_c=integer(gpu.get("Temperature", "GPU Slowdown Temp")),
            shutdown_c=integer(gpu.get("Temperature", "GPU Shutdown Temp")),
            max_operating_c=integer(gpu.get("Temperature", "GPU Max Operating Temp")),
        ),
        performance_state=clean(gpu.get("Performance State")),
        clock_event_reasons=_reasons(gpu),
        memory_total_mib=integer(gpu.get("FB Memory Usage", "Total")),
        pcie_gen_current=integer(link.get("PCIe Generation", "Current")) if link else None,
        pcie_gen_max=integer(link.get("PCIe Generation", "Max")) if link else None,
        pcie_width_current=integer(link.get("Link Width", "Current")) if link else None,
        pcie_width_max=integer(link.get("Link Width", "Max")) if link else None,
        fabric_state=clean(gpu.get("Fabric", "State")),
        fabric_status=clean(gpu.get("Fabric", "Status")),
        reset_required=flag(gpu.get("GPU Reset Status", "Reset Required")),
    )


def parse_text(text: str, warnings: list[str] | None = None) -> NvidiaSmiLog:
    """Parse `nvidia-smi -q` text. Lines skipped as diagnostics are appended to `warnings`."""
    skipped: list[str] = [] if warnings is None else warnings
    header, gpus = _tree(text, skipped)
    if not gpus and header.find("Driver Version") is None:
        first = next((line for line in text.splitlines() if line.strip()), None)
        raise ParseError(
            TOOL_TEXT,
            "no 'GPU <bus id>' section and no 'Driver Version' line: not nvidia-smi -q output",
            line=first,
        )
    return NvidiaSmiLog(
        timestamp=clean(header.get("Timestamp")),
        driver_version=clean(header.get("Driver Version")),
        cuda_version=clean(header.get("CUDA Version")),
        attached_gpus=integer(header.get("Attached GPUs")),
        gpus=tuple(_gpu(index, node) for index, node in enumerate(gpus)),
    )
