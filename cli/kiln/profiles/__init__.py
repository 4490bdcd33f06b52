"""Hardware profiles and the version-compatibility table.

The data lives in `hardware.yml` and `compat.yml` next to this module; this package only loads it
into typed models and answers questions about it (the table's models are in `compat`). Nothing
here prints or touches a host.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from kiln.profiles._common import Model as _Model
from kiln.profiles._common import parse_version, read_yaml
from kiln.profiles.compat import (
    Architecture,
    BurninRuntime,
    CompatProblem,
    CompatTable,
    Versions,
    load_compat,
)

__all__ = [
    "Architecture",
    "BurninFloors",
    "BurninRuntime",
    "CompatProblem",
    "CompatTable",
    "HardwareProfile",
    "NodeShape",
    "Versions",
    "burnin_runtime",
    "get_profile",
    "load_compat",
    "load_profiles",
    "parse_version",
    "profile_for_product_name",
]

GpuArchitecture = Literal["ampere", "ada", "hopper", "blackwell", "cdna3"]
GpuVendor = Literal["nvidia", "amd"]


# --------------------------------------------------------------------------- hardware profiles


class BurninFloors(_Model):
    gemm_tflops: float = Field(gt=0)  # absolute floor per GPU (per node for CPU-only)
    allreduce_busbw_gbs: float | None = Field(default=None, gt=0)
    # across a multi-node NVLink domain (an NVL72 rack), judged at 8 GiB: rack-scale profiles
    allreduce_domain_busbw_gbs: float | None = Field(default=None, gt=0)
    gemm_relative_pct: float = Field(default=10, gt=0, lt=100)  # below best GPU in node
    node_relative_pct: float = Field(default=10, gt=0, lt=100)  # below fleet median


class NodeShape(_Model):
    sockets: int = Field(ge=1)
    cores_per_socket: int = Field(ge=1)
    threads_per_core: int = Field(ge=1)
    real_memory_mb: int = Field(ge=1)

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core


class HardwareProfile(_Model):
    id: str
    name: str
    # Whose stack a GPU node gets: NVIDIA's (driver, CUDA, NCCL, DCGM) or AMD's (amdgpu, ROCm)
    vendor: GpuVendor = "nvidia"
    product_names: list[str] = Field(default_factory=list)
    gpu_count_min: int = Field(ge=0)
    gpu_count_max: int = Field(ge=0)
    gpu_count_default: int = Field(ge=0)
    bf16_tflops: float | None = Field(default=None, gt=0)
    memory_gib: int | None = Field(default=None, gt=0)
    power_limit_min_w: int | None = Field(default=None, gt=0)
    power_limit_max_w: int | None = Field(default=None, gt=0)
    power_limit_default_w: int | None = Field(default=None, gt=0)
    nvlink: bool = False
    nvswitch: bool = False
    fabric_manager_required: bool = False
    # Nodes of one multi-node NVLink domain (an NVL72 rack: 18 trays); 0: the node is its own.
    nvlink_domain_nodes: int = Field(default=0, ge=0)
    allreduce_busbw_gbs: float | None = Field(default=None, gt=0)
    burnin_floors: BurninFloors
    node_shape: NodeShape
    gres_type: str | None = None
    architecture: GpuArchitecture | None = None  # the key into compat.yml `architectures`
    compute_capability: str | None = None  # what CUDA calls it: "9.0" is sm_90
    min_driver_branch: int | None = None
    open_kernel_modules: bool = False
    min_rocm: str | None = None  # AMD: the oldest ROCm release that supports the GPU

    @property
    def is_gpu(self) -> bool:
        return self.gpu_count_max > 0

    @model_validator(mode="after")
    def _check_ranges(self) -> Self:
        if not self.gpu_count_min <= self.gpu_count_default <= self.gpu_count_max:
            raise ValueError(f"{self.id}: need gpu_count_min <= gpu_count_default <= gpu_count_max")
        power = (self.power_limit_min_w, self.power_limit_default_w, self.power_limit_max_w)
        if any(p is not None for p in power):
            if any(p is None for p in power):
                raise ValueError(f"{self.id}: give all three power limits or none")
            lo, default, hi = power
            if not lo < default <= hi:  # type: ignore[operator]
                raise ValueError(f"{self.id}: need power min < default <= max")
        if self.is_gpu and (
            self.bf16_tflops is None or self.gres_type is None or self.architecture is None
        ):
            raise ValueError(f"{self.id}: a GPU profile needs bf16_tflops, gres_type, architecture")
        if self.is_gpu and (self.vendor == "amd") != (self.min_rocm is not None):
            raise ValueError(f"{self.id}: an AMD GPU profile, and only one, needs min_rocm")
        return self


@functools.cache
def load_profiles() -> dict[str, HardwareProfile]:
    """Every hardware profile by id, with driver requirements merged in from compat.yml."""
    raw: dict[str, dict[str, Any]] = read_yaml("hardware.yml")
    compat = load_compat()
    gpu_rules = compat.gpu_profiles
    unknown = sorted(set(gpu_rules) - set(raw))
    if unknown:
        raise ValueError(f"compat.yml names unknown hardware profiles: {', '.join(unknown)}")
    profiles: dict[str, HardwareProfile] = {}
    for profile_id, data in raw.items():
        rule = gpu_rules.get(profile_id)
        extra = rule.model_dump() if rule else {}
        profile = HardwareProfile(id=profile_id, **data, **extra)
        if profile.architecture is not None and profile.architecture not in compat.architectures:
            raise ValueError(
                f"{profile_id}: architecture {profile.architecture} is not in compat.yml"
            )
        profiles[profile_id] = profile
    return profiles


def burnin_runtime(profile_id: str) -> BurninRuntime:
    """The torch build burn-in installs on a node of this profile, chosen by its GPU architecture
    from compat.yml (Blackwell needs a CUDA 12.8 build); the table's default for CPU-only nodes."""
    compat = load_compat()
    architecture = get_profile(profile_id).architecture
    return compat.runtime_for(architecture)


def get_profile(profile_id: str) -> HardwareProfile:
    """The profile with this id; KeyError naming the known ids if there is none."""
    profiles = load_profiles()
    try:
        return profiles[profile_id]
    except KeyError:
        raise KeyError(
            f"unknown hardware profile {profile_id!r}; known: {', '.join(sorted(profiles))}"
        ) from None


@functools.cache
def _by_product_name() -> dict[str, HardwareProfile]:
    index: dict[str, HardwareProfile] = {}
    for profile in load_profiles().values():
        for product in profile.product_names:
            key = " ".join(product.split()).casefold()
            if key in index:
                raise ValueError(f"product name {product!r} is in two hardware profiles")
            index[key] = profile
    return index


def profile_for_product_name(name: str) -> HardwareProfile | None:
    """The profile whose GPU reports this nvidia-smi product name (whitespace and case ignored)."""
    return _by_product_name().get(" ".join(name.split()).casefold())
