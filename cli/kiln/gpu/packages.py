"""Which driver action a node needs, and the exact package versions that go together.

Versions are Debian-style package versions ("535.183.06-1", "2.18.5-1+cuda12.2"); the driver
branch is the first field of the driver version (535). The fabric manager and NSCQ must be
exactly the driver's version, so their version is read from the installed driver, never chosen.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from kiln.gpu.platform import installed_driver
from kiln.profiles import load_compat, parse_version

DriverAction = Literal["install", "upgrade", "none"]
_TOOLKIT = re.compile(r"^cuda-toolkit-(\d+)-(\d+)$")


def installed_packages(dpkg_query: str) -> dict[str, str]:
    """Installed packages from `dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'`.

    Only "ii" (installed) and "hi" (held, installed) entries count: "rc" means removed with its
    configuration left behind.
    """
    found = {}
    for line in dpkg_query.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] in ("ii", "hi"):
            found[fields[0].split(":")[0]] = fields[1]
    return found


def branch_of(version: str | None) -> int | None:
    """535 from "535.183.06-1" (an epoch such as "1:" is skipped); None when there is none."""
    if not version:
        return None
    head = version.split(":", 1)[-1].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def upstream_version(version: str) -> str:
    """ "535.183.06" from "535.183.06-1" or "1:535.183.06-1~deb12u1": what nvidia-smi reports."""
    return version.split(":", 1)[-1].split("-", 1)[0]


def driver_action(installed: str | None, branch: int) -> dict[str, object]:
    """What the driver role must do on a node where `installed` is the driver package's version."""
    current = branch_of(installed)
    action: DriverAction
    if current is None:
        action = "install"
    elif current != branch:
        action = "upgrade"  # a downgrade is the same drain, replace, reboot, verify
    else:
        action = "none"
    return {"action": action, "from_branch": current, "to_branch": branch, "installed": installed}


def candidates(madison: str, branch: int, repository: str | None = None) -> list[str]:
    """Versions of the branch on offer, newest first, from `apt-cache madison PKG`.

    `repository` (a URL) keeps only the versions that repository offers: the distribution's
    archive may carry the same package names (Debian's non-free nvidia-driver) in other versions.
    """
    prefix = repository.rstrip("/") if repository else None
    versions = []
    for line in madison.splitlines():
        fields = [field.strip() for field in line.split("|")]
        if len(fields) < 3 or branch_of(fields[1]) != branch:
            continue
        if prefix is None or fields[2].startswith(prefix):
            versions.append(fields[1])
    return sorted(set(versions), key=lambda v: parse_version(upstream_version(v)), reverse=True)


def offered_branches(madison: str) -> list[int]:
    branches = {
        branch_of(line.split("|")[1].strip()) for line in madison.splitlines() if "|" in line
    }
    return sorted(b for b in branches if b is not None)


def nccl_package_version(nccl: str, cuda: str) -> str:
    """libnccl2's version in NVIDIA's repository: NCCL 2.18.5 built for CUDA 12.2."""
    return f"{nccl}-1+cuda{cuda}"


def cuda_toolkit_package(cuda: str) -> str:
    """NVIDIA's versioned toolkit meta package: cuda-toolkit-12-2 for CUDA 12.2."""
    return "cuda-toolkit-" + "-".join(cuda.split(".")[:2])


# The first CUDA whose compiler's crt headers are a package of their own (cuda-crt-12-2 is in
# NVIDIA's repositories for 12.2, 12.3 and 12.4; cuda-nvcc-X-Y depends on it where it exists).
CRT_PACKAGE_FROM = "12.2"


def nccl_tests_cuda_packages(cuda: str, cudart_dev: str = "cuda-cudart-dev") -> list[str]:
    """What building nccl-tests needs from NVIDIA's repository at CUDA `cuda`, without the whole
    toolkit: nvcc (cuda-nvcc-12-4), its crt headers (cuda-crt-12-4, CUDA 12.2 on) and the CUDA
    runtime's headers and libraries (cuda-cudart-dev-12-4; `cudart_dev` is the family's name,
    cuda-cudart-devel on dnf). The nccl role installs, holds them."""
    suffix = "-".join(cuda.split(".")[:2])
    crt = [f"cuda-crt-{suffix}"] if parse_version(cuda) >= parse_version(CRT_PACKAGE_FROM) else []
    return [f"cuda-nvcc-{suffix}", *crt, f"{cudart_dev}-{suffix}"]


def stack_versions(
    installed: dict[str, str], query: dict[str, Any] | None = None
) -> dict[str, str | None]:
    """The driver, CUDA toolkit and NCCL versions among a node's installed packages. `query`
    is the node's kiln.gpu.platform.stack_query: its driver package of any branch (Ubuntu's
    nvidia-driver-550, RHEL's nvidia-driver at 3:550.127.08-1.el9) and NCCL's library (libnccl2,
    libnccl); without it, Debian's names (nvidia-driver, libnccl2)."""
    toolkits = sorted(
        (f"{m[1]}.{m[2]}" for name in installed if (m := _TOOLKIT.match(name))),
        key=parse_version,
    )
    if query and query.get("driver_mains"):
        driver = installed_driver(installed, query)
        nccl = installed.get(query["nccl"]) if query.get("nccl") else None
    else:
        driver, nccl = installed.get("nvidia-driver"), installed.get("libnccl2")
    return {"driver": driver, "cuda": toolkits[-1] if toolkits else None, "nccl": nccl}


def installed_stack_problems(
    driver_version: str | None, cuda_version: str | None, nccl_version: str | None
) -> list[str]:
    """Combinations on a node that the compatibility table rejects, naming both versions.

    `cuda_version` is the toolkit installed (not what nvidia-smi's header says the driver
    supports); `nccl_version` is libnccl2's package version. Absent parts are not judged.
    """
    table = load_compat()
    problems = []
    branch = branch_of(driver_version)
    cuda = ".".join(cuda_version.split(".")[:2]) if cuda_version else None
    if branch is not None and cuda is not None:
        rule = table.driver_branches.get(branch)
        if rule is not None and parse_version(cuda) > parse_version(rule.max_cuda):
            problems.append(
                f"CUDA {cuda} is installed but driver {upstream_version(driver_version or '')} "
                f"(branch {branch}) runs CUDA {rule.max_cuda} at most"
            )
    if nccl_version and cuda is not None:
        nccl = upstream_version(nccl_version)
        built = nccl_version.partition("+cuda")[2] or None
        release = table.nccl.get(nccl)
        if built and parse_version(built) != parse_version(cuda):
            problems.append(f"NCCL {nccl} is built for CUDA {built} but CUDA {cuda} is installed")
        elif release is not None and not release.builds_for(cuda):
            problems.append(
                f"NCCL {nccl} is built for CUDA {release.min_cuda} to {release.max_cuda} "
                f"but CUDA {cuda} is installed"
            )
    return problems
