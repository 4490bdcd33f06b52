"""Hardware profiles and the version-compatibility table.

The data lives in `hardware.yml` and `compat.yml` next to this module; this module only loads it
into typed models and answers questions about it. Nothing here prints or touches a host.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from importlib import resources
from typing import Any, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "BurninFloors",
    "CompatProblem",
    "CompatTable",
    "HardwareProfile",
    "NodeShape",
    "Versions",
    "get_profile",
    "load_compat",
    "load_profiles",
    "parse_version",
    "profile_for_product_name",
]

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

VersionKey = Literal["driver_branch", "cuda", "nccl", "slurm"]


def parse_version(text: str) -> tuple[int, ...]:
    """'12.10' -> (12, 10). Dotted numeric versions compare correctly as tuples."""
    parts = str(text).strip().split(".")
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"not a dotted numeric version: {text!r}")
    return tuple(int(p) for p in parts)


def _read_yaml(name: str) -> Any:
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=_Loader)  # a safe loader: the C one when PyYAML has it


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _dotted(value: Any) -> str:
    value = str(value)
    parse_version(value)
    return value


# --------------------------------------------------------------------------- hardware profiles


class BurninFloors(_Model):
    gemm_tflops: float = Field(gt=0)  # absolute floor per GPU (per node for CPU-only)
    allreduce_busbw_gbs: float | None = Field(default=None, gt=0)
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
    allreduce_busbw_gbs: float | None = Field(default=None, gt=0)
    burnin_floors: BurninFloors
    node_shape: NodeShape
    gres_type: str | None = None
    min_driver_branch: int | None = None
    open_kernel_modules: bool = False

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
        if self.is_gpu and (self.bf16_tflops is None or self.gres_type is None):
            raise ValueError(f"{self.id}: a GPU profile needs bf16_tflops and gres_type")
        return self


@functools.cache
def load_profiles() -> dict[str, HardwareProfile]:
    """Every hardware profile by id, with driver requirements merged in from compat.yml."""
    raw: dict[str, dict[str, Any]] = _read_yaml("hardware.yml")
    gpu_rules = load_compat().gpu_profiles
    unknown = sorted(set(gpu_rules) - set(raw))
    if unknown:
        raise ValueError(f"compat.yml names unknown hardware profiles: {', '.join(unknown)}")
    profiles: dict[str, HardwareProfile] = {}
    for profile_id, data in raw.items():
        rule = gpu_rules.get(profile_id)
        extra = rule.model_dump() if rule else {}
        profiles[profile_id] = HardwareProfile(id=profile_id, **data, **extra)
    return profiles


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


# --------------------------------------------------------------------------- compatibility


class Versions(_Model):
    driver_branch: int
    cuda: str
    nccl: str
    slurm: str

    @field_validator("cuda", "nccl", "slurm", mode="before")
    @classmethod
    def _as_str(cls, value: Any) -> str:
        return _dotted(value)

    def describe(self) -> str:
        return (
            f"driver branch {self.driver_branch}, CUDA {self.cuda}, NCCL {self.nccl}, "
            f"Slurm {self.slurm}"
        )

    def sort_key(self) -> tuple[tuple[int, ...], ...]:
        return (
            (self.driver_branch,),
            parse_version(self.cuda),
            parse_version(self.nccl),
            parse_version(self.slurm),
        )


class CompatProblem(_Model):
    level: Literal["error", "warning"]
    key: VersionKey | None  # the field of kiln_versions at fault; None: the combination
    message: str
    hint: str


class DriverBranch(_Model):
    max_cuda: str

    @field_validator("max_cuda", mode="before")
    @classmethod
    def _as_str(cls, value: Any) -> str:
        return _dotted(value)


class GpuRule(_Model):
    min_driver_branch: int
    open_kernel_modules: bool = False


class FabricManagerRule(_Model):
    locked_to_driver: bool = True


class NcclRelease(_Model):
    min_cuda: str
    max_cuda: str

    @field_validator("min_cuda", "max_cuda", mode="before")
    @classmethod
    def _as_str(cls, value: Any) -> str:
        return _dotted(value)

    def builds_for(self, cuda: str) -> bool:
        return parse_version(self.min_cuda) <= parse_version(cuda) <= parse_version(self.max_cuda)


class Combination(Versions):
    default: bool = False

    def versions(self) -> Versions:
        return Versions(**self.model_dump(exclude={"default"}))


class CompatTable(_Model):
    driver_branches: dict[int, DriverBranch]
    gpu_profiles: dict[str, GpuRule] = Field(default_factory=dict)
    fabric_manager: FabricManagerRule = FabricManagerRule()
    nccl: dict[str, NcclRelease]
    slurm: list[str]
    tested: list[Combination]

    @field_validator("nccl", mode="before")
    @classmethod
    def _nccl_keys(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {_dotted(k): v for k, v in value.items()}
        return value

    @field_validator("slurm", mode="before")
    @classmethod
    def _slurm_items(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [_dotted(v) for v in value]
        return value

    @model_validator(mode="after")
    def _check_tested(self) -> Self:
        if not self.tested:
            raise ValueError("compat table: `tested` is empty")
        if sum(t.default for t in self.tested) > 1:
            raise ValueError("compat table: more than one tested combination is the default")
        return self

    # ---- queries

    def default_versions(self) -> Versions:
        """The tested combination marked `default: true`, else the newest tested one."""
        for combo in self.tested:
            if combo.default:
                return combo.versions()
        return max(self.tested, key=Versions.sort_key).versions()

    def is_tested(self, versions: Versions) -> bool:
        return any(combo.versions() == versions for combo in self.tested)

    def min_driver_for_cuda(self, cuda: str) -> int | None:
        """The oldest known driver branch that runs this CUDA, or None if none does."""
        wanted = parse_version(cuda)
        fits = [b for b, d in self.driver_branches.items() if parse_version(d.max_cuda) >= wanted]
        return min(fits) if fits else None

    def check(
        self, versions: Versions, gpu_profiles: Iterable[HardwareProfile] = ()
    ) -> list[CompatProblem]:
        """Every incompatibility in `versions` for nodes of these profiles (errors first)."""
        problems: list[CompatProblem] = []

        def error(key: VersionKey, message: str, hint: str) -> None:
            problems.append(CompatProblem(level="error", key=key, message=message, hint=hint))

        branch = self.driver_branches.get(versions.driver_branch)
        nccl = self.nccl.get(versions.nccl)
        cuda_t = parse_version(versions.cuda)

        if branch is None:
            error(
                "driver_branch",
                f"driver branch {versions.driver_branch} is not in the compatibility table",
                f"use one of: {', '.join(str(b) for b in sorted(self.driver_branches))}",
            )
        elif cuda_t > parse_version(branch.max_cuda):
            needed = self.min_driver_for_cuda(versions.cuda)
            if needed is None:
                newest = max(self.driver_branches)
                error(
                    "cuda",
                    f"CUDA {versions.cuda} is newer than any known driver branch supports "
                    f"(newest: {newest} with CUDA {self.driver_branches[newest].max_cuda}); "
                    f"kiln_versions.driver_branch is {versions.driver_branch}",
                    f"use CUDA {branch.max_cuda} or older",
                )
            else:
                error(
                    "cuda",
                    f"CUDA {versions.cuda} needs driver branch >= {needed}; "
                    f"kiln_versions.driver_branch is {versions.driver_branch}",
                    f"use driver branch {needed} or newer, or CUDA {branch.max_cuda}",
                )

        if nccl is None:
            error(
                "nccl",
                f"NCCL {versions.nccl} is not in the compatibility table",
                f"use one of: {', '.join(sorted(self.nccl, key=parse_version))}",
            )
        elif not nccl.builds_for(versions.cuda):
            fits = [v for v, r in self.nccl.items() if r.builds_for(versions.cuda)]
            alt = (
                f"use NCCL {max(fits, key=parse_version)} (newest built for CUDA {versions.cuda})"
                if fits
                else f"no known NCCL is built for CUDA {versions.cuda}"
            )
            error(
                "nccl",
                f"NCCL {versions.nccl} is built for CUDA {nccl.min_cuda} to {nccl.max_cuda}; "
                f"kiln_versions.cuda is {versions.cuda}",
                f"{alt}, or CUDA {nccl.min_cuda} to {nccl.max_cuda}",
            )

        if versions.slurm not in self.slurm:
            error(
                "slurm",
                f"Slurm {versions.slurm} is not in the compatibility table",
                f"use one of: {', '.join(self.slurm)}",
            )

        seen: set[str] = set()
        for profile in gpu_profiles:
            if profile.id in seen or profile.min_driver_branch is None:
                continue
            seen.add(profile.id)
            if versions.driver_branch < profile.min_driver_branch:
                error(
                    "driver_branch",
                    f"{profile.id} GPUs need driver branch >= {profile.min_driver_branch}; "
                    f"kiln_versions.driver_branch is {versions.driver_branch}",
                    f"use driver branch {self._branch_at_least(profile.min_driver_branch)} "
                    "or newer",
                )

        if not problems and not self.is_tested(versions):
            default = self.default_versions()
            problems.append(
                CompatProblem(
                    level="warning",
                    key=None,
                    message=f"{versions.describe()} is compatible but not a tested combination",
                    hint=f"the default tested combination is {default.describe()}",
                )
            )
        return problems

    def _branch_at_least(self, minimum: int) -> int:
        known = [b for b in self.driver_branches if b >= minimum]
        return min(known) if known else minimum


@functools.cache
def load_compat() -> CompatTable:
    """The version-compatibility table from compat.yml."""
    return CompatTable.model_validate(_read_yaml("compat.yml"))
