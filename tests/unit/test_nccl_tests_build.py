"""The nccl stage builds nccl-tests on every GPU node by default, against the pinned NCCL and the
pinned CUDA compiler and runtime it installs and holds (not the whole toolkit), so burn-in's
GPU all-reduce runs on the pinned NCCL instead of falling back to torch's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kiln.gpu.packages import nccl_tests_cuda_packages
from kiln.gpu.platform import role_platform
from kiln.profiles import load_compat
from role_defaults import render_role_defaults

ROOT = Path(__file__).parents[2]
ROLE = ROOT / "playbooks" / "roles" / "nccl"


@pytest.mark.parametrize(
    ("cuda", "packages"),
    [
        ("12.2", ["cuda-nvcc-12-2", "cuda-crt-12-2", "cuda-cudart-dev-12-2"]),
        ("12.8", ["cuda-nvcc-12-8", "cuda-crt-12-8", "cuda-cudart-dev-12-8"]),
        ("13.0", ["cuda-nvcc-13-0", "cuda-crt-13-0", "cuda-cudart-dev-13-0"]),
        ("11.8", ["cuda-nvcc-11-8", "cuda-cudart-dev-11-8"]),  # nvcc still held its crt
    ],
)
def test_the_cuda_packages_the_build_needs_are_named_by_the_pinned_cuda(cuda, packages):
    assert nccl_tests_cuda_packages(cuda) == packages


DEBIAN_12 = {"distribution": "Debian", "distribution_major_version": "12", "architecture": "x86_64"}
ROCKY_9 = {"distribution": "Rocky", "distribution_major_version": "9", "architecture": "x86_64"}


def render_defaults(versions: dict, facts: dict = DEBIAN_12) -> dict:
    """The nccl role's defaults as Ansible templates them for these kiln_versions, with the
    node's platform entry (vars/main.yml's __nccl_platform) from its facts."""
    keys = ("nccl_version", "nccl_cuda_version", "nccl_tests_build", "nccl_tests_cuda_packages")
    values = {"kiln_versions": versions, "__nccl_platform": role_platform(facts)}
    return render_role_defaults("nccl", values, keys)


def test_gpu_nodes_build_nccl_tests_by_default_on_the_pinned_cuda():
    """Not tied to nvidia_cuda_install (off by default): the role installs what it builds with."""
    default = load_compat().default_versions().model_dump()
    values = render_defaults(default)
    assert values["nccl_tests_build"] is True
    cuda = "-".join(str(default["cuda"]).split("."))
    assert values["nccl_tests_cuda_packages"] == [
        f"cuda-nvcc-{cuda}",
        f"cuda-crt-{cuda}",
        f"cuda-cudart-dev-{cuda}",
    ]
    assert render_defaults({"nccl": "2.18.5", "cuda": "12.2"})["nccl_tests_cuda_packages"] == [
        "cuda-nvcc-12-2",
        "cuda-crt-12-2",
        "cuda-cudart-dev-12-2",
    ]
    # dnf's name for the runtime's headers and libraries
    assert render_defaults({"nccl": "2.18.5", "cuda": "12.2"}, ROCKY_9)[
        "nccl_tests_cuda_packages"
    ] == ["cuda-nvcc-12-2", "cuda-crt-12-2", "cuda-cudart-devel-12-2"]


def test_the_build_installs_holds_and_checks_its_cuda_before_make():
    """In nccl_tests.yml: install the packages, hold each (the OS's mechanism: nvidia_repo's
    hold-apt-mark or hold-versionlock), check nvcc's release, then make; no step still asks for
    the whole toolkit."""
    tasks = yaml.safe_load((ROLE / "tasks" / "nccl_tests.yml").read_text())
    by_module = [next(k for k in t if k.startswith("ansible.builtin.")) for t in tasks]
    install = next(
        i
        for i, t in enumerate(tasks)
        if t.get("ansible.builtin.package", {}).get("name") == "{{ nccl_tests_cuda_packages }}"
    )
    hold = tasks[install + 1]
    assert hold["ansible.builtin.include_role"] == {
        "name": "nvidia_repo",
        "tasks_from": "hold-{{ __nccl_platform.hold }}",
    }
    assert hold["vars"] == {"nvidia_repo_hold": "{{ nccl_tests_cuda_packages }}"}
    for mechanism in ("apt-mark", "versionlock"):
        entry = yaml.safe_load(
            (ROLE.parent / "nvidia_repo/tasks" / f"hold-{mechanism}.yml").read_text()
        )
        assert "{{ nvidia_repo_hold }}" in str(entry)
    make = next(
        i
        for i, t in enumerate(tasks)
        if "'make'" in str(t.get("ansible.builtin.command", {}).get("argv", ""))
    )
    check = next(i for i, t in enumerate(tasks) if "release ' ~ nccl_cuda_version" in str(t))
    assert install < check < make and by_module[check] == "ansible.builtin.fail"
    assert "nvidia_cuda_install" not in (ROLE / "tasks" / "nccl_tests.yml").read_text()
