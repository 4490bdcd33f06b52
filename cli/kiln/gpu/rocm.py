"""The ROCm stack's decisions on an AMD Instinct node (the rocm role, through kiln_gpu_filters).

    release = rocm_release(facts, "6.2.4")     # repository paths, suite, packed build
    plan = action(listing, "6.2.4")            # install, none, upgrade (an older one), refuse
    problems = installed_problems(listing, release, names)  # what dpkg holds against it
    held = release_packages(listing, "6.2.4")  # every installed package of the release

AMD publishes each ROCm release as two apt repositories under one release number
(repo.radeon.com/amdgpu/<release>/ubuntu for the amdgpu driver, repo.radeon.com/rocm/apt/<release>
for ROCm), so configuring one release is the pin: nothing of another release is offered. Every
package of a release carries its packed build in its version (6.2.4 -> 60204: rocm-core
6.2.4.60204-139~22.04, amdgpu-dkms 1:6.8.5.60204-2111901.22.04); that is how an installed
package is known to be the declared release. `listing` is a dpkg-query listing (`installed`
reads it). Pure: text in, answers out.
"""

from __future__ import annotations

from typing import Any

from kiln.gpu.platform import PlatformError, facts_platform
from kiln.profiles import load_compat, parse_version

CORE = "rocm-core"  # names the release itself: its version starts with it


def packed_build(release: str) -> str:
    """ROCm's packed release number in package versions: 6.2.4 -> 60204, 6.3 -> 60300."""
    major, minor, patch = ([int(p) for p in release.split(".")] + [0, 0])[:3]
    return f"{major}{minor:02d}{patch:02d}"


def rocm_release(facts: dict[str, Any], release: str, suite: str | None = None) -> dict:
    """What the rocm role needs for ROCm `release` on this node: the Ubuntu suite of AMD's
    repositories (`suite` overrides the OS's, for a mirror that serves another), both
    repository paths and the packed build. PlatformError when the release or OS is not one
    kiln installs ROCm on (kiln validate refuses those before a stage runs)."""
    table = load_compat()
    known = table.rocm.get(str(release))
    if known is None:
        raise PlatformError(
            f"ROCm {release} is not in kiln's compatibility table "
            f"(known: {', '.join(sorted(table.rocm))})"
        )
    os_id, _arch = facts_platform(facts)
    chosen = suite or table.rocm_platforms.get(os_id or "")
    if chosen is None:
        raise PlatformError(
            f"no ROCm repository for {os_id}: AMD publishes ROCm for "
            f"{', '.join(table.rocm_platforms)} (set rocm_repo_suite for a mirror of another)"
        )
    return {
        "release": str(release),
        "suite": chosen,
        "build": packed_build(str(release)),
        "amdgpu": known.amdgpu,
        "amdgpu_path": f"amdgpu/{release}/ubuntu",
        "rocm_path": f"rocm/apt/{release}",
    }


def installed_problems(listing: str, release: dict, packages: list[str]) -> list[str]:
    """Why the installed packages are not ROCm `release` (a `dpkg-query -W -f
    '${Package}\\t${Version}\\t${db:Status-Status}\\n'` listing); [] when every one of
    `packages` is installed at a version of that release's build."""
    versions = installed(listing)
    build = f".{release['build']}-"
    problems = []
    for name in packages:
        version = versions.get(name)
        if version is None:
            problems.append(f"{name} is not installed")
        elif build not in version:
            problems.append(
                f"{name} {version} is not of ROCm {release['release']} (build {release['build']})"
            )
    core = versions.get(CORE)
    if core is not None and not core.startswith(release["release"] + "."):
        problems.append(f"{CORE} {core} names another ROCm release than {release['release']}")
    return problems


def action(listing: str, release: str) -> dict:
    """What the role does for ROCm `release` given what dpkg holds: install (no ROCm), none
    (this release), upgrade (an older one: its packages, by build, are moved to this release's),
    or refuse (a newer one: apt does not take a whole release back, and kiln does not try)."""
    versions = installed(listing)
    now = _release_of(versions)
    if now is None:
        return {"action": "install", "installed": None, "packages": []}
    if now == release:
        return {"action": "none", "installed": now, "packages": []}
    packages = _of_build(versions, now)
    if parse_version(now) > parse_version(release):
        return {"action": "refuse", "installed": now, "packages": packages,
                "why": f"ROCm {now} is installed, newer than the declared {release}: kiln "
                       "moves a node to a newer ROCm release only"}  # fmt: skip
    return {"action": "upgrade", "installed": now, "packages": packages}


def release_packages(listing: str, release: str) -> list[str]:
    """Every installed package of ROCm `release` (its packed build in the version): the named
    ones and the dependencies apt pulled in with them, all of which the role holds."""
    return _of_build(installed(listing), release)


def installed(listing: str) -> dict[str, str]:
    """Package -> version of the installed packages in a dpkg-query listing (see above)."""
    found = {}
    for line in listing.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[2] == "installed":
            found[fields[0]] = fields[1]
    return found


def _release_of(versions: dict[str, str]) -> str | None:
    """The ROCm release rocm-core says is installed (6.2.4 from 6.2.4.60204-139~22.04)."""
    core = versions.get(CORE)
    return ".".join(core.split(".")[:3]) if core is not None else None


def _of_build(versions: dict[str, str], release: str) -> list[str]:
    build = f".{packed_build(release)}-"
    return [name for name, version in versions.items() if build in version]
