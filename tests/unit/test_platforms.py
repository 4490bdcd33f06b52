"""The NVIDIA stack's platform layer (kiln.profiles platforms.yml, kiln.gpu.platform): for each
recorded real `ansible_facts` (tests/fixtures/real/ansible-facts, SOURCE.txt), the repository,
key, packages and hold mechanism the roles would use; validate's refusals with file:line;
preflight's comparison of facts with kiln_os/kiln_arch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln.gpu.filters import FILTERS
from kiln.gpu.platform import PlatformError, pinned, platform_mismatch, role_platform
from kiln.inventory.context import read_context
from kiln.inventory.findings import FindingCollector
from kiln.inventory.rules import platform as platform_rules
from kiln.profiles.platforms import load_platforms

FACTS = Path(__file__).parent.parent / "fixtures" / "real" / "ansible-facts"
REPOS = "https://developer.download.nvidia.com/compute/cuda/repos"


def facts(name: str) -> dict:
    return json.loads((FACTS / name).read_text())


def test_debian_12_x86_64_is_what_the_role_did_before():
    """The default platform renders exactly the URL, key and packages of before #28."""
    debian = {
        "distribution": "Debian",
        "distribution_version": "12.5",
        "distribution_major_version": "12",
        "architecture": "x86_64",
        "kernel": "6.1.0-28-amd64",
    }
    got = role_platform(debian, 550)
    assert got["repository_url"] == f"{REPOS}/debian12/x86_64/"
    assert got["key_url"] == f"{REPOS}/debian12/x86_64/3bf863cc.pub"
    assert got["key_fingerprint"] == "EB693B3035CD5710E231E123A4B469963BF863CC"
    assert got["driver_packages"] == [
        "nvidia-driver",
        "nvidia-kernel-dkms",
        "nvidia-smi",
        "nvidia-persistenced",
    ]
    assert got["hold"] == "apt-mark" and got["nccl_packages"] == ["libnccl2", "libnccl-dev"]
    assert got["headers_package"] == "linux-headers-6.1.0-28-amd64"
    assert got["initramfs_command"] == ["update-initramfs", "-u", "-k", "all"]


def test_ubuntu_22_04_is_ubuntu2204_not_ubuntu22():
    got = role_platform(facts("ubuntu-22.04-x86_64.json"), 550)
    assert got["os"] == "ubuntu-22.04"
    assert got["repository_url"] == f"{REPOS}/ubuntu2204/x86_64/"
    assert got["key_url"].endswith("/ubuntu2204/x86_64/3bf863cc.pub")
    assert got["driver_packages"] == [
        "nvidia-driver-550",
        "nvidia-dkms-550",
        "nvidia-utils-550",
        "nvidia-compute-utils-550",
    ]
    assert got["hold"] == "apt-mark" and got["version_separator"] == "="
    assert got["mpi_home"] == "/usr/lib/x86_64-linux-gnu/openmpi"


def test_ubuntu_24_04_aarch64_is_sbsa():
    got = role_platform(facts("ubuntu-24.04-aarch64.json"), 570, "open")
    assert got["os"] == "ubuntu-24.04"
    assert got["repository_url"] == f"{REPOS}/ubuntu2404/sbsa/"
    assert got["driver_main"] == "nvidia-driver-570-open"
    assert got["mpi_home"] == "/usr/lib/aarch64-linux-gnu/openmpi"


@pytest.mark.parametrize(
    ("name", "pick"),
    [
        ("rhel-9.7-aarch64.json", None),
        ("almalinux-9.7-aarch64.json", None),
        ("rocky-9.2.json", "x86_64"),
        ("rocky-9.6-and-ubuntu-24.04.json", "rocky"),
    ],
)
def test_rhel_9_and_rebuilds_use_rhel9_the_rpm_key_and_versionlock(name, pick):
    recorded = facts(name)
    if pick == "rocky":
        recorded = {**recorded["rocky"], "ansible_architecture": "x86_64"}
    elif pick:
        recorded = {**recorded, "ansible_architecture": pick}  # the capture shows no arch
    got = role_platform(recorded, 550)
    arch_dir = "sbsa" if recorded["ansible_architecture"] == "aarch64" else "x86_64"
    assert got["os"] == "rhel-9"
    assert got["repository_url"] == f"{REPOS}/rhel9/{arch_dir}/"
    assert got["key_url"] == f"{REPOS}/rhel9/{arch_dir}/D42D0685.pub"
    assert got["key_fingerprint"] == "610C7B14E068A878070DA4E99CD0A493D42D0685"
    assert got["hold"] == "versionlock"
    assert got["hold_packages"] == ["python3-dnf-plugin-versionlock"]
    assert got["nccl_packages"] == ["libnccl", "libnccl-devel"]
    assert got["cudart_dev"] == "cuda-cudart-devel" and got["mpi_home"] == "/usr/lib64/openmpi"
    assert pinned(got["nccl_packages"], "2.21.5-1+cuda12.4", "-") == [
        "libnccl-2.21.5-1+cuda12.4",
        "libnccl-devel-2.21.5-1+cuda12.4",
    ]


def test_debian_13_has_its_own_key_and_no_arm_repository():
    debian13 = {
        "distribution": "Debian",
        "distribution_version": "13.1",
        "distribution_major_version": "13",
        "architecture": "x86_64",
    }
    got = role_platform(debian13)
    assert got["key_url"] == f"{REPOS}/debian13/x86_64/8793F200.pub"
    assert got["key_fingerprint"] == "02182E60104FCDC26EAE1B8597A5D4CB8793F200"
    with pytest.raises(PlatformError, match="no NVIDIA stack for Debian 13.1 aarch64"):
        role_platform({**debian13, "architecture": "aarch64"})


def test_preflight_names_both_the_declared_and_the_running_platform():
    ubuntu = facts("ubuntu-24.04-aarch64.json")
    assert platform_mismatch(ubuntu, "ubuntu-24.04", "aarch64") is None
    assert platform_mismatch(ubuntu, "debian-12", "x86_64") == (
        "the inventory declares kiln_os debian-12, kiln_arch x86_64; the node runs Ubuntu "
        "24.04 aarch64 (ubuntu-24.04, aarch64): correct kiln_os/kiln_arch for this node or "
        "its group"
    )
    assert FILTERS["kiln_platform_mismatch"](ubuntu, "ubuntu-24.04", "aarch64") == ""


def test_the_table_refuses_what_nvidia_does_not_publish():
    table = load_platforms()
    assert table.problems("debian-12", "x86_64", 550) == []
    assert table.problems("debian-13", "x86_64", 550) == [
        "NVIDIA's debian13 repository has no driver branch 550: its first branch is 580"
    ]
    assert "no aarch64 (sbsa) repository" in table.problems("debian-12", "aarch64")[0]
    assert table.problems("sles-15", "x86_64")[0].startswith("kiln_os 'sles-15' is not")


HOSTS = """\
all:
  vars:
    kiln_versions: {driver_branch: 550, cuda: "12.4", nccl: "2.21.5"}
  children:
    kiln_controllers:
      hosts:
        ctl01: {ansible_host: 10.0.0.1}
    kiln_compute:
      vars: {kiln_gpu_model: h100-sxm}
      hosts:
        gpu01: {ansible_host: 10.0.1.1}
        gpu02: {ansible_host: 10.0.1.2, kiln_os: debian-13, kiln_arch: aarch64}
        gpu03: {ansible_host: 10.0.1.3, kiln_os: rocky-9}
"""


def test_validate_refuses_a_platform_with_file_and_line(tmp_path):
    (tmp_path / "hosts.yml").write_text(HOSTS)
    ctx = read_context(tmp_path, FindingCollector())
    assert ctx is not None
    got = {}
    for name in ("ctl01", "gpu01", "gpu02", "gpu03"):
        out = FindingCollector()
        platform_rules.os_is_supported(ctx, ctx.hosts[name], out)
        got[name] = [(f.origin.display(ctx.raw.root), f.message) for f in out.findings]
    assert got["ctl01"] == [] and got["gpu01"] == []
    assert sorted(got["gpu02"], key=lambda f: f[1])[0] == (
        "hosts.yml:12",
        "gpu02: NVIDIA publishes no aarch64 (sbsa) repository for Debian 13 (trixie) (only x86_64)",
    )
    assert sorted(got["gpu02"], key=lambda f: f[1])[1] == (
        "hosts.yml:3",
        "gpu02: NVIDIA's debian13 repository has no driver branch 550: its first branch is 580",
    )
    assert got["gpu03"] == [
        (
            "hosts.yml:13",
            "gpu03: kiln_os 'rocky-9' is not an OS kiln knows (debian-12, "
            "debian-13, ubuntu-22.04, ubuntu-24.04, rhel-9)",
        )
    ]
