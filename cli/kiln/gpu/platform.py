"""What the nvidia and nccl roles use on a node's OS: repository, key, packages, holds.

One entry of kiln.profiles' platforms.yml, chosen from the node's Ansible facts, turned into the
values the roles read (filter kiln_gpu_platform), so OS differences are data, not `when:`
branches in tasks. Preflight compares the same facts with the inventory's kiln_os/kiln_arch
(platform_mismatch).
"""

from __future__ import annotations

import fnmatch
import re
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

    driver = platform.driver
    distribution = getattr(driver.distribution, flavour) if driver.distribution else None
    stream = getattr(driver.stream, flavour) if driver.stream else None

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
        # the main package of either flavour, {branch} left in: an installed driver of any branch
        "driver_mains": [driver.proprietary[0], driver.open[0]],
        "driver_stream": stream.replace("{branch}", str(branch)) if stream and branch else None,
        "driver_distribution_packages": named(distribution) if distribution else None,
        "fabricmanager_packages": named(driver.fabricmanager),
        "companion_version": family.companion_version,
        "userns_sysctl": platform.userns_sysctl,
        "nccl_packages": list(family.nccl_packages),
        "version_separator": family.version_separator,
        "cudart_dev": family.cudart_dev,
        "build_packages": list(family.build_packages),
        "mpi_packages": list(family.mpi_packages),
        "mpi_home": family.mpi_home.replace("{arch}", arch),
        "mpi_include": (family.mpi_include or "").replace("{arch}", arch),
        "initramfs_command": list(family.initramfs_command),
        "headers_package": family.headers_package.replace("{kernel}", kernel),
    }


def userns_sysctl(facts: dict[str, Any]) -> str:
    """The sysctl that restricts unprivileged user namespaces on this node's OS (Ubuntu 24.04's
    AppArmor restriction), or "" where there is none, or the OS has no entry (the base role runs
    on every node, GPU stack or not)."""
    os_id, _ = facts_platform(facts)
    platform = load_platforms().get(os_id) if os_id else None
    return (platform.userns_sysctl or "") if platform else ""


# The package manager of an OS family kiln has no entry for, by Ansible's os_family: preflight
# still reads the installed stack there with the family's names (an older Debian or EL release).
_FAMILY_OF_OS_FAMILY = {"Debian": "apt", "RedHat": "dnf"}
# The CUDA toolkit's packages (cuda-toolkit-12-4), as a dpkg-query / rpm -qa pattern.
TOOLKIT_PATTERN = "cuda-toolkit-[0-9]*"


def stack_query(facts: dict[str, Any]) -> dict[str, Any]:
    """What preflight asks the package manager for the installed driver, CUDA toolkit and NCCL
    (filter kiln_stack_query): the family (apt: dpkg-query, dnf: rpm -qa; "" where the OS is of
    neither), the patterns (the driver's main package of either flavour with any branch, NCCL's
    library, cuda-toolkit-X-Y) and the names kiln_stack_versions reads back. Never raises: it
    runs before preflight says a node runs an OS kiln lacks."""
    table = load_platforms()
    os_id, _ = facts_platform(facts)
    platform = table.get(os_id) if os_id else None
    if platform is None:
        family_name = _FAMILY_OF_OS_FAMILY.get(str(_fact(facts, "os_family") or ""), "")
        platform = next((p for p in table.platforms.values() if p.family == family_name), None)
    if platform is None:
        return {"family": "", "patterns": [], "driver_mains": [], "nccl": None}
    family = table.families[platform.family]
    mains = [platform.driver.proprietary[0], platform.driver.open[0]]
    patterns: list[str] = []
    for main in (m.replace("{branch}", "*") for m in mains):
        if not any(fnmatch.fnmatchcase(main, p) for p in patterns):
            patterns.append(main)  # nvidia-driver-*-open is nvidia-driver-*'s already
    return {
        "family": platform.family,
        "patterns": [*patterns, family.nccl_packages[0], TOOLKIT_PATTERN],
        "driver_mains": mains,
        "nccl": family.nccl_packages[0],
    }


def installed_driver(installed: dict[str, str], platform: dict[str, Any]) -> str | None:
    """The installed driver's package version, of any branch and either flavour (Ubuntu's
    nvidia-driver-535 on a node moving to 550), or None when no driver is installed."""
    for template in platform["driver_mains"]:
        pattern = re.compile("^" + re.escape(template).replace(r"\{branch\}", r"\d+") + "$")
        for name in sorted(installed):
            if pattern.match(name):
                return installed[name]
    return None


def rpm_installed(rpm_query: str) -> dict[str, str]:
    """Installed packages from `rpm -q --qf '%{NAME} %{EPOCH}:%{VERSION}-%{RELEASE}\\n' NAMES`,
    as kiln_dpkg_installed gives dpkg's: name -> version, the epoch kept where there is one
    ("3:550.54.15-1.el9"); "package X is not installed" lines are skipped."""
    found = {}
    for line in rpm_query.splitlines():
        fields = line.split()
        if len(fields) != 2 or line.startswith("package "):
            continue
        name, version = fields
        found[name] = version.removeprefix("(none):")
    return found


def driver_install_names(
    platform: dict[str, Any],
    target: str,
    packages: list[str],
    fabricmanager: bool = False,
    pin_all: bool = True,
) -> list[str]:
    """What the package manager is asked to install: the driver's main package at exactly
    `target`, the rest of its packages at the same version (`pin_all`; the distribution's archive
    leaves them to the main package's dependencies), and the fabric manager and NSCQ at the
    driver's version as this OS spells theirs (exact on apt; upstream on dnf)."""
    sep = platform["version_separator"]
    main, *rest = packages
    names = [f"{main}{sep}{target}"] + [f"{n}{sep}{target}" if pin_all else n for n in rest]
    if fabricmanager:
        companion = target if platform["companion_version"] == "exact" else _upstream(target)
        names += [f"{n}{sep}{companion}" for n in platform["fabricmanager_packages"]]
    return names


def module_streams(listing: str, module: str) -> dict[str, Any]:
    """What `dnf module list MODULE` says: whether the repositories have the module at all,
    its streams, and the enabled one ([e] beside the stream), or None."""
    streams, enabled = [], None
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) < 2 or fields[0] != module:
            continue
        streams.append(fields[1])
        # the stream's own markers come right after it: "550-dkms [e]", "latest-dkms [d][e]"
        if len(fields) > 2 and fields[2].startswith("[") and "[e]" in fields[2]:
            enabled = fields[1]
    return {"present": bool(streams), "streams": streams, "enabled": enabled}


def _upstream(version: str) -> str:
    return version.split(":", 1)[-1].split("-", 1)[0]


def pinned(packages: list[str], version: str, separator: str) -> list[str]:
    """Packages at one exact version, as the package manager spells it (apt name=1.2-1, dnf
    name-1.2-1)."""
    return [f"{name}{separator}{version}" for name in packages]


def _fact(facts: dict[str, Any], name: str) -> Any:
    return facts.get(name, facts.get(f"ansible_{name}"))
