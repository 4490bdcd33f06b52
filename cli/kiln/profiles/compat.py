"""The version-compatibility table (compat.yml): driver branches, CUDA, NCCL, Slurm, GPU rules.

`CompatTable.check` answers whether a set of versions works for nodes of given hardware profiles;
`burnin_runtime` which torch build burn-in installs for a GPU architecture.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from kiln.profiles._common import Dotted, Model, dotted, parse_version, read_yaml

if TYPE_CHECKING:
    from kiln.profiles import HardwareProfile

VersionKey = Literal["driver_branch", "cuda", "nccl", "slurm", "rocm"]


class Versions(Model):
    driver_branch: int
    cuda: Dotted
    nccl: Dotted
    slurm: Dotted
    rocm: Dotted | None = None  # AMD Instinct nodes only: no default (see CompatTable.check_rocm)

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


class CompatProblem(Model):
    level: Literal["error", "warning"]
    key: VersionKey | None  # the field of kiln_versions at fault; None: the combination
    message: str
    hint: str


class DriverBranch(Model):
    max_cuda: Dotted


class GpuRule(Model):
    """A GPU profile's stack floor: NVIDIA's driver branch, or for AMD Instinct the ROCm release."""

    min_driver_branch: int | None = None
    open_kernel_modules: bool = False
    min_rocm: Dotted | None = None

    @model_validator(mode="after")
    def _one_stack(self) -> Self:
        if (self.min_driver_branch is None) == (self.min_rocm is None):
            raise ValueError("give a GPU profile min_driver_branch (NVIDIA) or min_rocm (AMD)")
        return self


class RocmRelease(Model):
    """A ROCm release as AMD publishes it for apt: the amdgpu driver release in the same
    repository tree (repo.radeon.com/amdgpu/<release>/ubuntu) and the Ubuntu suites it has."""

    amdgpu: str  # the amdgpu-dkms version's release part (1:<amdgpu>.<build>-...)
    suites: list[str]  # Ubuntu codenames with a repository for this release


class FabricManagerRule(Model):
    locked_to_driver: bool = True


class NcclRelease(Model):
    min_cuda: Dotted
    max_cuda: Dotted

    def builds_for(self, cuda: str) -> bool:
        return parse_version(self.min_cuda) <= parse_version(cuda) <= parse_version(self.max_cuda)


class Architecture(Model):
    """A GPU architecture: the oldest CUDA with kernels for it (NVIDIA; None for AMD's, which
    ROCm serves), and burn-in's torch build."""

    min_cuda: Dotted | None = None
    min_rocm: Dotted | None = None  # AMD's: the oldest ROCm with kernels for it
    burnin_runtime: str  # a key of `burnin_runtimes`

    def built_for(self, runtime: BurninRuntime) -> bool:
        """Whether a torch build has kernels for this architecture (its CUDA or ROCm is new
        enough)."""
        for needs, has in ((self.min_cuda, runtime.cuda), (self.min_rocm, runtime.rocm)):
            if needs is not None and (has is None or parse_version(has) < parse_version(needs)):
                return False
        return True


class BurninRuntime(Model):
    """A torch build the burnin role installs into its venv (torch's CUDA wheels bundle the CUDA
    runtime, cuBLAS and NCCL; a wheel runs only on architectures it carries kernels for)."""

    name: str = ""  # its key in compat.yml
    torch: Dotted
    cuda: Dotted | None = None  # a CUDA build, or
    rocm: Dotted | None = None  # a ROCm build (PyTorch's rocmX.Y wheels bundle HIP and RCCL)
    index_url: str
    default: bool = False  # the build for nodes without a GPU architecture

    @property
    def requirements(self) -> list[str]:
        return [f"torch=={self.torch}"]

    def for_ansible(self) -> dict[str, Any]:
        return {**self.model_dump(), "requirements": self.requirements}


class Combination(Versions):
    default: bool = False

    def versions(self) -> Versions:
        return Versions(**self.model_dump(exclude={"default"}))


class CompatTable(Model):
    driver_branches: dict[int, DriverBranch]
    gpu_profiles: dict[str, GpuRule] = Field(default_factory=dict)
    fabric_manager: FabricManagerRule = FabricManagerRule()
    nccl: dict[str, NcclRelease]
    slurm: list[str]
    tested: list[Combination]
    architectures: dict[str, Architecture] = Field(default_factory=dict)
    burnin_runtimes: dict[str, BurninRuntime] = Field(default_factory=dict)
    rocm: dict[str, RocmRelease] = Field(default_factory=dict)
    rocm_platforms: dict[str, str] = Field(default_factory=dict)  # kiln_os -> Ubuntu suite

    @field_validator("burnin_runtimes", mode="before")
    @classmethod
    def _runtime_names(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: {**v, "name": k} if isinstance(v, dict) else v for k, v in value.items()}
        return value

    @field_validator("nccl", "rocm", mode="before")
    @classmethod
    def _dotted_keys(cls, value: Any) -> Any:
        """Releases keyed by version, written in YAML as numbers or strings: their dotted text."""
        if isinstance(value, dict):
            return {dotted(k): v for k, v in value.items()}
        return value

    @field_validator("slurm", mode="before")
    @classmethod
    def _slurm_items(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [dotted(v) for v in value]
        return value

    @model_validator(mode="after")
    def _check_tested(self) -> Self:
        if not self.tested:
            raise ValueError("compat table: `tested` is empty")
        if sum(t.default for t in self.tested) > 1:
            raise ValueError("compat table: more than one tested combination is the default")
        if self.burnin_runtimes and sum(r.default for r in self.burnin_runtimes.values()) != 1:
            raise ValueError("compat table: mark exactly one burn-in runtime `default: true`")
        for name, arch in self.architectures.items():
            runtime = self.burnin_runtimes.get(arch.burnin_runtime)
            if runtime is None:
                raise ValueError(f"{name}: unknown burn-in runtime {arch.burnin_runtime}")
            if not arch.built_for(runtime):
                needs = f"CUDA >= {arch.min_cuda}" if arch.min_cuda else f"ROCm >= {arch.min_rocm}"
                raise ValueError(
                    f"{name} needs {needs}; burn-in runtime {runtime.name} is built for "
                    f"CUDA {runtime.cuda}, ROCm {runtime.rocm}"
                )
        return self

    # ---- queries

    def default_versions(self) -> Versions:
        """The tested combination marked `default: true`, else the newest tested one."""
        for combo in self.tested:
            if combo.default:
                return combo.versions()
        return max(self.tested, key=Versions.sort_key).versions()

    def is_tested(self, versions: Versions) -> bool:
        # An exact Slurm version (24.05.8) is tested as its release (24.05).
        release = versions.model_copy(update={"slurm": _release(versions.slurm), "rocm": None})
        return any(combo.versions() == release for combo in self.tested)

    def runtime_for(self, architecture: str | None) -> BurninRuntime:
        """Burn-in's torch build for a GPU architecture; the default one for None (no GPU)."""
        if architecture is None:
            return next(r for r in self.burnin_runtimes.values() if r.default)
        return self.burnin_runtimes[self.architectures[architecture].burnin_runtime]

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

        if _release(versions.slurm) not in self.slurm:
            error(
                "slurm",
                f"Slurm {versions.slurm} is not in the compatibility table",
                f"use one of: {', '.join(self.slurm)}",
            )

        seen: set[str] = set()
        for profile in gpu_profiles:
            if (
                profile.id in seen
                or profile.min_driver_branch is None
                or profile.vendor != "nvidia"
            ):
                continue
            seen.add(profile.id)
            arch = self.architectures.get(profile.architecture or "")
            if arch is not None and arch.min_cuda and cuda_t < parse_version(arch.min_cuda):
                error(
                    "cuda",
                    f"{profile.id} GPUs ({profile.architecture}) need CUDA >= {arch.min_cuda}; "
                    f"kiln_versions.cuda is {versions.cuda}",
                    f"use CUDA {arch.min_cuda} or newer",
                )
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

    def check_rocm(
        self, rocm: str | None, profile: HardwareProfile, os_id: str
    ) -> list[tuple[str, str]]:
        """Why a node of this AMD profile on this OS cannot get ROCm `rocm`, as (what is at
        fault: "rocm" or "os", why); [] when it can. The release must be declared, known, new
        enough for the GPU and published by AMD for the OS."""
        known = ", ".join(sorted(self.rocm, key=parse_version))
        if rocm is None:
            return [("rocm", f"{profile.id} GPUs need kiln_versions.rocm (one of: {known})")]
        release = self.rocm.get(rocm)
        if release is None:
            return [("rocm", f"ROCm {rocm} is not in the compatibility table (known: {known})")]
        problems = []
        if profile.min_rocm and parse_version(rocm) < parse_version(profile.min_rocm):
            problems.append(
                ("rocm", f"{profile.id} GPUs need ROCm >= {profile.min_rocm}; "
                         f"kiln_versions.rocm is {rocm}")
            )  # fmt: skip
        suite = self.rocm_platforms.get(os_id)
        if suite is None:
            offered = ", ".join(self.rocm_platforms)
            problems.append(
                ("os", f"kiln installs ROCm on {offered} (AMD's apt repositories); "
                       f"kiln_os is {os_id}")
            )  # fmt: skip
        elif suite not in release.suites:
            problems.append(
                ("os", f"AMD publishes ROCm {rocm} for {', '.join(release.suites)}, "
                       f"not {suite} ({os_id})")
            )  # fmt: skip
        return problems

    def _branch_at_least(self, minimum: int) -> int:
        known = [b for b in self.driver_branches if b >= minimum]
        return min(known) if known else minimum


def _release(version: str) -> str:
    """'24.05' from '24.05.8': the table lists Slurm releases."""
    return ".".join(version.split(".")[:2])


@functools.cache
def load_compat() -> CompatTable:
    """The version-compatibility table from compat.yml."""
    return CompatTable.model_validate(read_yaml("compat.yml"))
