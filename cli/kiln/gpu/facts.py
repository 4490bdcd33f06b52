"""What `nvidia-smi -q -x` says about a node's GPUs, and whether that is what it should be.

Where a node has no XML, the plain-text `nvidia-smi -q` is read into the same model and judged
by the same verdicts. The node sends its output gzip-compressed and base64-encoded (an 8-GPU
XML document is about 100 KB, 10 KB packed: it travels in every run's events). The summary keeps
the fields preflight, the driver verification and `kiln facts` use, as plain JSON-ready data.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import re
from dataclasses import dataclass
from typing import Any

from kiln.parsers import ParseError
from kiln.parsers.nvidia_smi import Gpu, NvidiaSmiLog, parse_xml
from kiln.parsers.nvidia_smi_nvlink import NvlinkState, parse_nvlink_status
from kiln.parsers.nvidia_smi_text import parse_text


def unpack(packed: str) -> str:
    """The XML text from the module's gzip + base64 form."""
    try:
        return gzip.decompress(base64.b64decode(packed, validate=True)).decode()
    except (binascii.Error, OSError, EOFError, UnicodeDecodeError) as error:
        raise ParseError("nvidia-smi -q -x", f"packed output is unreadable ({error})") from None


def pack(xml: str) -> str:
    """The inverse of `unpack` (the module does the same with the standard library)."""
    return base64.b64encode(gzip.compress(xml.encode())).decode()


def _gpu_summary(gpu: Gpu) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "pci_bus_id": gpu.pci_bus_id,
        "product_name": gpu.product_name,
        "serial": gpu.serial,
        "uuid": gpu.uuid,
        "persistence_mode": gpu.persistence_mode,
        "ecc_mode": gpu.ecc_mode_current,
        "ecc_volatile_uncorrectable": gpu.ecc_errors.volatile_uncorrectable,
        "ecc_aggregate_uncorrectable": gpu.ecc_errors.aggregate_uncorrectable,
        "retired_pages_pending": gpu.retired_pages.pending,
        "retired_pages_double_bit": gpu.retired_pages.double_bit,
        "remapped_rows_pending": gpu.remapped_rows.pending,
        "remapped_rows_failure": gpu.remapped_rows.failure,
        "power_limit_w": gpu.power.current_limit_w or gpu.power.enforced_limit_w,
        "power_default_limit_w": gpu.power.default_limit_w,
        "power_min_limit_w": gpu.power.min_limit_w,
        "power_max_limit_w": gpu.power.max_limit_w,
        "memory_total_mib": gpu.memory_total_mib,
        "fabric_state": gpu.fabric_state,
        "fabric_status": gpu.fabric_status,
        "nvlink_domain": gpu.nvlink_domain,
        "reset_required": gpu.reset_required,
    }


def _nvlink_summary(links: list[NvlinkState]) -> dict[str, Any]:
    speeds = [link.speed_gbs for link in links if link.active and link.speed_gbs is not None]
    return {
        "links": len(links),
        "active": sum(link.active for link in links),
        "inactive": [link.link for link in links if not link.active],
        "speed_gbs": min(speeds) if speeds else None,
    }


def summarise(
    log: NvidiaSmiLog, nvlink: dict[int, list[NvlinkState]] | None = None
) -> dict[str, Any]:
    """The node's GPUs; `nvlink` (from `nvidia-smi nvlink --status`) adds each GPU's links."""
    return {
        "driver_version": log.driver_version,
        "cuda_version": log.cuda_version,
        "attached_gpus": log.attached_gpus,
        "gpu_count": log.gpu_count,
        "gpus": (gpus := [_gpu_summary(gpu) for gpu in log.gpus]),
        "unreported": unreported({"gpus": gpus}),
        # JSON keys are strings: GPU index -> its links; None when nvidia-smi could not say.
        "nvlink": None
        if nvlink is None
        else {str(index): _nvlink_summary(links) for index, links in sorted(nvlink.items())},
    }


# The health fields `check` judges, and what each is called where one is not reported.
_HEALTH_FIELDS = {
    "ecc_volatile_uncorrectable": "uncorrectable ECC errors",
    "retired_pages_pending": "retired pages",
    "remapped_rows_pending": "remapped rows",
    "reset_required": "GPU reset required",
}


def unreported(summary: dict[str, Any]) -> list[str]:
    """The health checks nvidia-smi gave no figure for (N/A: Blackwell and the 580 drivers
    report retired pages so, row remapping replacing them), one line per check naming the
    GPUs: not a fault and not a pass, so preflight says which checks had no data."""
    lines = []
    for field, what in _HEALTH_FIELDS.items():
        missing = [str(gpu["index"]) for gpu in summary["gpus"] if gpu.get(field) is None]
        if missing:
            gpus = (
                "every GPU" if len(missing) == len(summary["gpus"]) else "GPU " + ",".join(missing)
            )
            lines.append(f"{what}: not reported on {gpus} (N/A), so not checked")
    return lines


def summary_from_packed(
    packed: str, nvlink_packed: str = "", text_packed: str = ""
) -> dict[str, Any]:
    """The summary from the module's packed outputs: the XML, or where the node had none, the
    plain-text `nvidia-smi -q` (`text_packed`; "source" says which was read). NVLink output kiln
    cannot read leaves the links unknown (and says why under "nvlink_error") rather than failing
    the GPU facts; lines the text reader skipped are listed under "warnings"."""
    nvlink, nvlink_error = None, None
    if nvlink_packed:
        try:
            nvlink = parse_nvlink_status(unpack(nvlink_packed))
        except ParseError as error:
            nvlink_error = str(error)
    warnings: list[str] = []
    if packed or not text_packed:
        summary = summarise(parse_xml(unpack(packed)), nvlink)
        summary["source"] = "nvidia-smi -q -x"
    else:
        summary = summarise(parse_text(unpack(text_packed), warnings), nvlink)
        summary["source"] = "nvidia-smi -q"
    if nvlink_error:
        summary["nvlink_error"] = nvlink_error
    if warnings:
        summary["warnings"] = warnings
    return summary


@dataclass(frozen=True, slots=True)
class Expected:
    """What the inventory and the stack promise for one node."""

    gpu_count: int
    product_names: tuple[str, ...] = ()  # empty: any model
    driver_version: str | None = None  # exact ("535.183.06") or a branch prefix ("535")
    # NVSwitch system: each GPU must have joined the fabric and have every NVLink active
    # (a PCIe card with NVLink bridges uses only some of its links, so it is not judged).
    fabric_manager: bool = False
    # A multi-node NVLink domain (kiln_nvlink_domain, an NVL72 rack): every GPU must have joined
    # it (fabric state Completed, status Success, ClusterUUID and CliqueId set), and be in the
    # declared one where that is written as nvidia-smi names it (ClusterUUID.CliqueId).
    nvlink_domain: str | None = None
    health: bool = True  # judge ECC, retired pages and row remapping too


def fabric_pending(summary: dict[str, Any]) -> bool:
    """True while a GPU has not finished joining the NVSwitch fabric (worth waiting for)."""
    return any(gpu["fabric_state"] not in (None, "Completed") for gpu in summary["gpus"])


def _health_problems(gpu: dict[str, Any]) -> list[str]:
    name = f"GPU {gpu['index']} ({gpu['pci_bus_id']}, serial {gpu['serial'] or 'unknown'})"
    found = []
    if gpu["ecc_volatile_uncorrectable"]:
        found.append(f"{name}: {gpu['ecc_volatile_uncorrectable']} uncorrectable ECC errors")
    if gpu["retired_pages_pending"]:
        found.append(f"{name}: retired pages pending (reset or reboot the GPU)")
    if gpu["remapped_rows_failure"]:
        found.append(f"{name}: row remapping failed (replace the GPU)")
    elif gpu["remapped_rows_pending"]:
        found.append(f"{name}: remapped rows pending (reset or reboot the GPU)")
    if gpu["reset_required"]:
        found.append(f"{name}: needs a GPU reset")
    return found


# A domain as nvidia-smi names it: "<ClusterUUID>.<CliqueId>" (kiln.parsers.nvidia_smi).
_DOMAIN_ID = re.compile(r"^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\.\d+$")


def _domain_problems(gpus: list[dict[str, Any]], declared: str) -> list[str]:
    """The fabric gate of a GPU in a multi-node NVLink domain (an NVL72 tray): joined, with an
    identity, and in the declared rack. A tray short of it must not run jobs: NCCL across the
    rack would fall back or hang."""
    found = []
    for gpu in gpus:
        name = f"GPU {gpu['index']}"
        state, status = gpu["fabric_state"], gpu["fabric_status"]
        if state != "Completed" or status != "Success":
            found.append(
                f"{name}: NVLink fabric state {state or 'not reported'}, status "
                f"{status or 'not reported'}: the tray has not joined its NVLink domain"
            )
        elif gpu["nvlink_domain"] is None:
            found.append(f"{name}: no NVLink domain (ClusterUUID or CliqueId unset)")
        elif _DOMAIN_ID.match(declared) and gpu["nvlink_domain"] != declared:
            found.append(
                f"{name}: in NVLink domain {gpu['nvlink_domain']}, the inventory declares "
                f"{declared} (kiln_nvlink_domain): another rack, or the inventory is wrong"
            )
    return found


def _driver_matches(installed: str | None, wanted: str) -> bool:
    if installed is None:
        return False
    return installed == wanted or installed.startswith(wanted + ".")


def check(summary: dict[str, Any], expected: Expected) -> list[str]:
    """Every way the node's GPUs differ from `expected`, as sentences; empty when they match."""
    problems: list[str] = []
    gpus = summary["gpus"]
    shown = summary["gpu_count"]
    if shown != expected.gpu_count:
        attached = summary.get("attached_gpus")
        extra = f" ({attached} attached)" if attached not in (None, shown) else ""
        problems.append(
            f"the driver sees {shown} GPUs{extra}, the inventory declares {expected.gpu_count}"
        )
    if expected.driver_version and not _driver_matches(
        summary["driver_version"], expected.driver_version
    ):
        problems.append(
            f"driver {summary['driver_version'] or 'unknown'} is loaded, "
            f"expected {expected.driver_version}"
        )
    if expected.product_names:
        wrong = sorted({g["product_name"] or "unknown" for g in gpus} - set(expected.product_names))
        if wrong:
            problems.append(
                f"GPU model {', '.join(wrong)} is not the declared one "
                f"({', '.join(expected.product_names)})"
            )
    if expected.fabric_manager:
        for gpu in gpus:
            state = gpu["fabric_state"]
            if state is not None and state != "Completed":
                problems.append(
                    f"GPU {gpu['index']}: NVSwitch fabric state {state}"
                    f" ({gpu['fabric_status'] or 'no status'}): is nvidia-fabricmanager running?"
                )
            elif gpu["fabric_status"] not in (None, "Success"):
                problems.append(
                    f"GPU {gpu['index']}: NVSwitch fabric status {gpu['fabric_status']}"
                )
    if expected.nvlink_domain:
        problems.extend(_domain_problems(gpus, expected.nvlink_domain))
    if expected.fabric_manager and summary.get("nvlink") is not None:
        problems.extend(_nvlink_problems(gpus, summary["nvlink"]))
    if expected.health:
        for gpu in gpus:
            problems.extend(_health_problems(gpu))
    return problems


def _nvlink_problems(gpus: list[dict[str, Any]], nvlink: dict[str, dict[str, Any]]) -> list[str]:
    found = []
    for gpu in gpus:
        links = nvlink.get(str(gpu["index"]))
        if links is None:
            found.append(f"GPU {gpu['index']}: missing from nvidia-smi nvlink --status")
        elif links["links"] == 0:
            found.append(f"GPU {gpu['index']}: no NVLink is active")
        elif links["inactive"]:
            listed = ", ".join(str(link) for link in links["inactive"])
            found.append(
                f"GPU {gpu['index']}: NVLink {listed} inactive "
                f"({links['active']} of {links['links']} active)"
            )
    return found


def load_failure_cause(
    *, kernel: str, version: str, smi_error: str, module_built: bool, make_log_tail: str = ""
) -> str:
    """Why nvidia-smi cannot talk to the driver after an install, as one actionable sentence."""
    said = smi_error.strip().splitlines()[0] if smi_error.strip() else "no output"
    if not module_built:
        where = f"/var/lib/dkms/nvidia/{version}/build/make.log"
        tail = " | ".join(line.strip() for line in make_log_tail.strip().splitlines()[-3:])
        detail = f": {tail}" if tail else ""
        return (
            f"DKMS did not build the nvidia {version} module for kernel {kernel}"
            f" (see {where}){detail}"
        )
    return (
        f"the nvidia {version} module is built for kernel {kernel} but nvidia-smi fails "
        f"({said}): reboot the node, or let kiln reboot it (nvidia_driver_reboot: true)"
    )
