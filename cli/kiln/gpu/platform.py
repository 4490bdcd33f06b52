"""What the nvidia and nccl roles use on a node's OS: repository, key, packages, holds.

One entry of kiln.profiles' platforms.yml, chosen from the node's Ansible facts, turned into the
values the roles read (filter kiln_gpu_platform), so OS differences are data, not `when:`
branches in tasks. Preflight compares the same facts with the inventory's kiln_os/kiln_arch
(platform_mismatch).
"""

from __future__ import annotations

from typing import Any

from kiln.profiles.platforms import ARCH_DIRS, load_platforms


class PlatformError(ValueError):
    """The node runs an OS or architecture the NVIDIA stack has no entry for."""


def facts_platform(facts: dict[str, Any]) -> tuple[str | None, str]:
    """(kiln_os, kiln_arch) a node's facts describe; kiln_os None for an OS kiln lacks."""
    arch = str(facts.get("architecture", facts.get("ansible_architecture", "")))
    return load_platforms().os_of_facts(facts), arch


def platform_mismatch(facts: dict[str, Any], declared_os: str, declared_arch: str) -> str | None:
    """Why a node's facts contradict its declared kiln_os/kiln_arch, or None when they agree."""
    os_id, arch = facts_platform(facts)
    seen = f"{_fact(facts, 'distribution')} {_fact(facts, 'distribution_version')} {arch}".strip()
    if os_id == declared_os and arch == declared_arch:
        return None
    return (
        f"the inventory declares kiln_os {declared_os}, kiln_arch {declared_arch}; the node runs "
        f"{seen} ({os_id or 'an OS kiln has no entry for'}, {arch}): correct kiln_os/kiln_arch "
        "for this node or its group"
    )


def role_platform(
    facts: dict[str, Any], branch: int | str | None = None, flavour: str = "proprietary"
) -> dict[str, Any]:
    """Everything the roles read for this node: repository URL and key, driver and NCCL
    package names, the hold mechanism, build packages. Raises PlatformError for an OS or
    architecture kiln has no entry for (validate refuses those before a stage runs)."""
    table = load_platforms()
    os_id, arch = facts_platform(facts)
    platform = table.get(os_id) if os_id else None
    if platform is None or arch not in platform.arches:
        raise PlatformError(
            f"no NVIDIA stack for {_fact(facts, 'distribution')} "
            f"{_fact(facts, 'distribution_version')} {arch}: kiln supports "
            + ", ".join(f"{k} ({'/'.join(p.arches)})" for k, p in table.platforms.items())
        )
    family = table.families[platform.family]
    key = table.keys[platform.key]
    url = platform.repository_url(arch)
    kernel = str(_fact(facts, "kernel") or "")

    def named(names: list[str]) -> list[str]:
        return [n.replace("{branch}", str(branch)) for n in names] if branch else list(names)

    return {
        "os": os_id,
        "arch": arch,
        "arch_dir": ARCH_DIRS[arch],
        "family": platform.family,
        "hold": family.hold,
        "branch_pin": family.branch_pin,
        "hold_packages": list(family.hold_packages),
        "repository_url": url,
        "key_url": url + key.file,
        "key_fingerprint": key.fingerprint,
        "driver_role": platform.driver_role,
        "driver_main": named(getattr(platform.driver, flavour))[0],
        "driver_query": list(platform.driver.query),
        "driver_packages": named(getattr(platform.driver, flavour)),
        "nccl_packages": list(family.nccl_packages),
        "version_separator": family.version_separator,
        "cudart_dev": family.cudart_dev,
        "build_packages": list(family.build_packages),
        "mpi_packages": list(family.mpi_packages),
        "mpi_home": family.mpi_home.replace("{arch}", arch),
        "initramfs_command": list(family.initramfs_command),
        "headers_package": family.headers_package.replace("{kernel}", kernel),
    }


def pinned(packages: list[str], version: str, separator: str) -> list[str]:
    """Packages at one exact version, as the package manager spells it (apt name=1.2-1, dnf
    name-1.2-1)."""
    return [f"{name}{separator}{version}" for name in packages]


def _fact(facts: dict[str, Any], name: str) -> Any:
    return facts.get(name, facts.get(f"ansible_{name}"))
