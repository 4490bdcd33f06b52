"""kiln_monitoring: the monitoring stage (docs/monitoring.md), as the inventory sets it."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Prometheus label names (data model: [a-zA-Z_][a-zA-Z0-9_]*; `__` is reserved) and the labels
# kiln sets itself, which a site label may not replace.
_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
KILN_LABELS = ("cluster", "node", "rack", "role", "exporter", "gpu_model")
_PATH = re.compile(r"^/[A-Za-z0-9._/-]+\.json$")
# The Debian version of datacenter-gpu-manager-exporter (e.g. 4.1.1-1): letters, digits, . + ~ -
_VERSION = re.compile(r"^[0-9][A-Za-z0-9.+~:-]*$")

# The key as the schema's catalogue lists it (kiln.inventory.schema.KEYS).
MONITORING_KEY = (
    "kiln_monitoring",
    "cluster",
    "MonitoringSpec",
    "the monitoring stage: node exporter, DCGM exporter, Prometheus targets (docs/monitoring.md)",
    "off; node exporter :9100, DCGM exporter :9400 on GPU nodes",
)


class MonitoringSpec(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    enabled: bool = Field(False, description="the monitoring stage runs (kiln plan shows it)")
    node_exporter_port: int = Field(9100, ge=1, le=65535, description="node exporter's port")
    dcgm_exporter: bool = Field(True, description="NVIDIA's DCGM exporter on GPU nodes")
    dcgm_exporter_port: int = Field(9400, ge=1, le=65535, description="DCGM exporter's port")
    dcgm_exporter_version: str | None = Field(
        None, description="datacenter-gpu-manager-exporter version; unset: newest, then held"
    )
    targets_path: str = Field(
        "/etc/prometheus/file_sd/kiln.json",
        description="the file_sd targets file kiln writes on the controllers",
    )
    target_address: Literal["address", "name"] = Field(
        "address", description="scrape each node at ansible_host (address) or its inventory name"
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="extra labels on every target, e.g. {site: ams1}"
    )

    @field_validator("targets_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not _PATH.match(value) or "/../" in f"{value}/":
            raise ValueError("must be an absolute path of plain characters ending in .json")
        return value

    @field_validator("dcgm_exporter_version")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None and not _VERSION.match(value):
            raise ValueError("must be a Debian package version such as 4.1.1-1")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [name for name in value if not _LABEL.match(name) or name.startswith("__")]
        if bad:
            raise ValueError(f"label names must match [A-Za-z_][A-Za-z0-9_]*, no `__`: {bad}")
        taken = [name for name in value if name in KILN_LABELS]
        if taken:
            raise ValueError(f"kiln sets {taken} itself; choose other label names")
        return value
