"""kiln_health: the node health check Slurm runs (docs/health.md), as the inventory sets it."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Slurm's HealthCheckNodeState words (slurm.conf(5)); CYCLE may join any of them.
NODE_STATES = ("ALLOC", "ANY", "CYCLE", "IDLE", "MIXED", "NONDRAINED_IDLE")
CHECK_IDS = (
    "gpu_count",
    "gpu_model",
    "persistence",
    "ecc",
    "retired_pages",
    "remapped_rows",
    "throttle",
    "nvlink",
    "fabric_manager",
    "xid",
    "ib_port",
    "ib_errors",
    "mount",
    "time_sync",
    "slurmd",
    "munge",
    "disk",
)  # kiln.health.checks.CHECKS
# The Xids that mean "take the node out" (NVIDIA's Xid catalogue: uncorrectable ECC 48, page
# retirement/row remap 63 64, NVLink 74, fallen off the bus 79, high SBE rate 92, contained and
# uncontained ECC 94 95, GSP 119 120).
DRAIN_XIDS = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120)
_MOUNT = re.compile(r"^/[A-Za-z0-9._/@+-]*$")


class HealthSpec(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    enabled: bool = Field(
        False, description="HealthCheckProgram and the Prolog subset in slurm.conf"
    )
    interval: int = Field(300, ge=1, description="HealthCheckInterval, seconds")
    node_state: str = Field("ANY", description="HealthCheckNodeState, e.g. ANY or IDLE,CYCLE")
    auto_resume: bool = Field(
        False, description="resume a node drained for health once its check passes again"
    )
    prolog: bool = Field(True, description="run prolog_checks before every job (when enabled)")
    prolog_checks: list[str] = Field(
        default_factory=lambda: ["gpu_count", "mount", "disk"],
        description="the fast subset the Prolog runs",
    )
    mounts: list[str] = Field(default_factory=list, description="mount points that must exist")
    skip: list[str] = Field(default_factory=list, description="check ids not run on any node")
    min_free_mib: int = Field(1024, ge=0, description="free MiB /tmp and the slurmd spool need")
    probe_timeout_s: float = Field(10.0, gt=0, le=120, description="seconds a probe may take")
    drain_xids: list[int] = Field(default_factory=lambda: list(DRAIN_XIDS))
    ecc_uncorrectable_max: int = Field(0, ge=0, description="volatile uncorrectable ECC per GPU")
    retired_pages_max: int = Field(60, ge=0, description="double-bit retired pages per GPU")
    remapped_rows_max: int = Field(512, ge=0, description="uncorrectable remapped rows per GPU")
    ib_errors_per_minute_max: float = Field(
        10.0, ge=0, description="an IB error counter rising faster than this fails"
    )

    @field_validator("node_state")
    @classmethod
    def _node_state(cls, value: str) -> str:
        words = value.split(",")
        if not all(word in NODE_STATES for word in words):
            raise ValueError(f"must be words of {', '.join(NODE_STATES)}, comma-separated")
        return value

    @field_validator("prolog_checks", "skip")
    @classmethod
    def _checks(cls, value: list[str]) -> list[str]:
        unknown = [v for v in value if v not in CHECK_IDS]
        if unknown:
            raise ValueError(f"unknown check ids {unknown}; known: {', '.join(CHECK_IDS)}")
        return value

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        bad = [m for m in value if not _MOUNT.match(m)]
        if bad:
            raise ValueError(f"must be absolute paths of plain characters: {bad}")
        return value
