"""The operating systems the NVIDIA stack runs on (platforms.yml): one entry per OS release.

An inventory declares each node's `kiln_os` (debian-12, debian-13, ubuntu-22.04, ubuntu-24.04,
rhel-9) and `kiln_arch` (x86_64, aarch64); validate checks them here, preflight checks the
node's facts against them, and the nvidia/nccl roles read the same entry (kiln.gpu.platform).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import Field

from kiln.profiles._common import Model, read_yaml

Arch = Literal["x86_64", "aarch64"]
# NVIDIA's directory per architecture: arm64 servers are "sbsa" (Server Base System Architecture).
ARCH_DIRS: dict[str, str] = {"x86_64": "x86_64", "aarch64": "sbsa"}
REPOSITORY_ROOT = "https://developer.download.nvidia.com/compute/cuda/repos"


class Family(Model):
    hold: Literal["apt-mark", "versionlock"]
    branch_pin: Literal["apt-preferences", "dnf-module"]
    hold_packages: list[str]
    nccl_packages: list[str]
    version_separator: str
    cudart_dev: str
    build_packages: list[str]
    mpi_packages: list[str]
    mpi_home: str
    # Open MPI's headers where not under mpi_home/include (dnf: /usr/include/openmpi-x86_64)
    mpi_include: str | None = None
    initramfs_command: list[str]
    headers_package: str
    # the fabric manager's and NSCQ's version: the driver's exact package version (apt), or its
    # upstream version (dnf: they carry no epoch where the driver's packages do)
    companion_version: Literal["exact", "upstream"]


class Key(Model):
    file: str
    fingerprint: str = Field(pattern=r"^[0-9A-F]{40}$")


class Flavours(Model):
    proprietary: list[str]
    open: list[str]


class Streams(Model):
    proprietary: str
    open: str


class DriverPackages(Model):
    query: list[str]
    stream: Streams | None = None  # the dnf module stream that pins the branch
    proprietary: list[str]
    open: list[str]
    fabricmanager: list[str]
    distribution: Flavours | None = None  # the distribution's archive; None: not offered


class Platform(Model):
    id: str = ""  # its key in platforms.yml
    name: str
    distributions: list[str]
    version: str
    python: str  # the release's /usr/bin/python3, major.minor (the burn-in venv's wheels)
    glibc: str  # its C library (the manylinux tag those wheels need)
    family: Literal["apt", "dnf"]
    repo: str
    arches: list[Arch]
    key: str
    min_driver_branch: int
    driver_role: bool
    userns_sysctl: str | None = None  # the sysctl restricting unprivileged user namespaces
    driver: DriverPackages

    def repository_url(self, arch: str) -> str:
        return f"{REPOSITORY_ROOT}/{self.repo}/{ARCH_DIRS[arch]}/"


class PlatformTable(Model):
    default: dict[str, str]
    families: dict[str, Family]
    keys: dict[str, Key]
    platforms: dict[str, Platform]

    def get(self, os_id: str) -> Platform | None:
        return self.platforms.get(os_id)

    def problems(self, os_id: str, arch: str, driver_branch: int | None = None) -> list[str]:
        """Why kiln cannot run the NVIDIA stack on this OS and architecture (and driver
        branch, for nodes with GPUs); [] when it can."""
        platform = self.get(os_id)
        if platform is None:
            return [f"kiln_os '{os_id}' is not an OS kiln knows ({', '.join(self.platforms)})"]
        if arch not in ARCH_DIRS:
            return [f"kiln_arch '{arch}' is not an architecture kiln knows (x86_64, aarch64)"]
        problems = []
        if arch not in platform.arches:
            problems.append(
                f"NVIDIA publishes no {arch} ({ARCH_DIRS[arch]}) repository for {platform.name}"
                f" (only {', '.join(platform.arches)})"
            )
        if driver_branch is not None and driver_branch < platform.min_driver_branch:
            problems.append(
                f"NVIDIA's {platform.repo} repository has no driver branch {driver_branch}: "
                f"its first branch is {platform.min_driver_branch}"
            )
        if driver_branch is not None and not platform.driver_role:
            problems.append(
                f"kiln's nvidia_driver role does not install the driver on {platform.name} yet "
                "(the repository is; the driver's per-branch packages are not)"
            )
        return problems

    def os_of_facts(self, facts: dict[str, Any]) -> str | None:
        """The kiln_os a node's Ansible facts describe (ansible_ prefixed or not), or None."""
        distribution = _fact(facts, "distribution")
        version = str(_fact(facts, "distribution_version") or "")
        major = str(_fact(facts, "distribution_major_version") or version.split(".")[0])
        for os_id, platform in self.platforms.items():
            if distribution not in platform.distributions:
                continue
            if platform.version in (version, major):
                return os_id
        return None


def _fact(facts: dict[str, Any], name: str) -> Any:
    return facts.get(name, facts.get(f"ansible_{name}"))


@functools.cache
def load_platforms() -> PlatformTable:
    data = read_yaml("platforms.yml")
    for os_id, entry in data["platforms"].items():
        entry["id"] = os_id
    return PlatformTable.model_validate(data)
