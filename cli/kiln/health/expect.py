"""What a node should have, for its health check: /etc/kiln/health.json, from the inventory.

    expectations("gpu001", "h100-sxm", 8, ["mlx5_0", ...], kiln_ib, kiln_health)  # -> dict

The GPU part comes from the hardware profile (count, product names, NVLink, the fabric manager
of NVSwitch systems), the fabric part from the node's declared HCAs and kiln_ib.link_rate_gbps,
the node part and every threshold from kiln_health (kiln.inventory.schema.HealthSpec). A node
of no GPUs has "gpu": null, one of no HCAs "fabric": null: their probes are not run. The roles
reach this through the `kiln_health_expectations` filter; NODE_FILES are the modules the health
role copies onto each node.
"""

from __future__ import annotations

from pathlib import Path

import kiln
from kiln.inventory.schema import HealthSpec, IbSpec, ansible_plain
from kiln.profiles import get_profile

VERSION = 1
SLURMD_SPOOL = "/var/spool/slurmd"  # SlurmdSpoolDir of templates/slurm.conf.j2
# kiln's modules the node program imports (relative to the kiln package): nothing else ships.
NODE_FILES = (
    "__init__.py",
    "errors.py",
    "parsers/__init__.py",
    "parsers/_common.py",
    "parsers/drain_reason.py",
    "parsers/ibstat.py",
    "parsers/nvidia_smi_nvlink.py",
    "parsers/nvidia_smi_query.py",
    "parsers/nvrm_xid.py",
    "parsers/perfquery.py",
    "parsers/slurm.py",
    "health/__init__.py",
    "health/checks.py",
    "health/clock.py",
    "health/decide.py",
    "health/node.py",
)


def health_spec(raw: dict | HealthSpec | None) -> HealthSpec:
    if isinstance(raw, HealthSpec):
        return raw
    return HealthSpec.model_validate(ansible_plain(raw or {}))


def expectations(
    name: str,
    gpu_model: str,
    gpu_count: int,
    ib_hcas: list[str] | tuple[str, ...],
    ib: dict | IbSpec | None = None,
    health: dict | HealthSpec | None = None,
) -> dict:
    spec = health_spec(health)
    ib_spec = ib if isinstance(ib, IbSpec) else IbSpec.model_validate(ansible_plain(ib or {}))
    profile = get_profile(gpu_model)
    gpu = None
    if profile.is_gpu and gpu_count > 0 and profile.vendor == "amd":
        # AMD Instinct: amdgpu's GPUs counted from sysfs; nvidia-smi's checks (ECC, retired
        # pages, throttling, Xids) have no AMD reading in kiln yet (amd-smi), said by the probe
        gpu = {"model": profile.id, "count": gpu_count, "vendor": "amd"}
    elif profile.is_gpu and gpu_count > 0:
        gpu = {
            "model": profile.id,
            "count": gpu_count,
            "product_names": list(profile.product_names),
            "nvlink": profile.nvlink and profile.nvswitch,
            "fabric_manager": profile.fabric_manager_required,
            "persistence_mode": True,
        }
    fabric = {"hcas": list(ib_hcas), "rate_gbps": ib_spec.link_rate_gbps} if ib_hcas else None
    return {
        "kind": "kiln-health-expectations",
        "version": VERSION,
        "node": {
            "name": name,
            "mounts": list(spec.mounts),
            "disks": {"/tmp": spec.min_free_mib, SLURMD_SPOOL: spec.min_free_mib},
        },
        "gpu": gpu,
        "fabric": fabric,
        "xids": list(spec.drain_xids),
        "thresholds": {
            "ecc_uncorrectable_max": spec.ecc_uncorrectable_max,
            "retired_pages_max": spec.retired_pages_max,
            "remapped_rows_max": spec.remapped_rows_max,
            "ib_errors_per_minute_max": spec.ib_errors_per_minute_max,
        },
        "skip": list(spec.skip),
        "prolog_checks": list(spec.prolog_checks),
        "timeout_s": spec.probe_timeout_s,
        "auto_resume": spec.auto_resume,
    }


def kiln_package_dir(_: object = None) -> str:
    """Where the running kiln package is (the engine's PYTHONPATH): the role copies from here."""
    return str(Path(kiln.__file__).resolve().parent)


FILTERS = {
    "kiln_health_expectations": expectations,
    "kiln_package_dir": kiln_package_dir,
    "kiln_health_node_files": lambda _=None: list(NODE_FILES),
}
