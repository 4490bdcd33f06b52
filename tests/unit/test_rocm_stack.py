"""AMD Instinct nodes: their profiles, validate's ROCm rules, the rocm stage in the plan (and
NVIDIA's stages leaving them alone), and the rocm role's decisions (kiln.gpu.rocm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kiln.errors import InvalidInputError
from kiln.gpu.platform import PlatformError
from kiln.gpu.rocm import (
    action,
    installed_problems,
    packed_build,
    release_packages,
    rocm_release,
)
from kiln.inventory import load_cluster, require_valid
from kiln.inventory.export import export_inventory
from kiln.plan import make_plan
from kiln.plan.model import PlanOptions
from kiln.plan.stages import select_stages
from kiln.profiles import get_profile, load_compat
from role_defaults import render_role_defaults

UBUNTU_2204 = {"distribution": "Ubuntu", "distribution_version": "22.04",
               "distribution_major_version": "22", "os_family": "Debian",
               "architecture": "x86_64"}  # fmt: skip
DEBIAN_13 = {"distribution": "Debian", "distribution_version": "13",
             "distribution_major_version": "13", "os_family": "Debian",
             "architecture": "x86_64"}  # fmt: skip


def write_inventory(root: Path, rocm: str | None = "6.2.4", amd_os: str = "ubuntu-24.04") -> Path:
    """Two H100 nodes and two MI300X nodes under one controller, on Ubuntu 24.04 and the Slurm
    it ships."""
    versions = {"driver_branch": 570, "cuda": "12.8", "nccl": "2.25.1"}
    if rocm:
        versions["rocm"] = rocm
    (root / "group_vars").mkdir(parents=True)
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump({"kiln_versions": versions}))
    hosts = {
        "all": {
            "vars": {"kiln_os": "ubuntu-24.04"},  # here, so the instinct group's own wins
            "children": {
                "kiln_controllers": {"hosts": {"ctl01": {"ansible_host": "10.0.0.1"}}},
                "kiln_compute": {
                    "children": {
                        "hopper": {
                            "hosts": {
                                "h01": {"ansible_host": "10.0.1.1"},
                                "h02": {"ansible_host": "10.0.1.2"},
                            },
                            "vars": {"kiln_gpu_model": "h100-sxm"},
                        },  # fmt: skip
                        "instinct": {
                            "hosts": {
                                "m01": {"ansible_host": "10.0.2.1"},
                                "m02": {"ansible_host": "10.0.2.2"},
                            },
                            "vars": {"kiln_gpu_model": "mi300x", "kiln_os": amd_os},
                        },  # fmt: skip
                    }
                },
            },
        }
    }
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return root


def test_the_amd_profiles_carry_their_rocm_floor_and_no_nvidia_stack():
    mi300x, mi325x = get_profile("mi300x"), get_profile("mi325x")
    assert (mi300x.vendor, mi300x.architecture, mi300x.min_driver_branch) == ("amd", "cdna3", None)
    assert (mi300x.min_rocm, mi325x.min_rocm) == ("6.0.0", "6.4.0")
    assert mi300x.burnin_floors.allreduce_busbw_gbs == 304
    assert not mi300x.fabric_manager_required and not mi300x.nvlink
    assert get_profile("h100-sxm").vendor == "nvidia"


def test_a_mixed_inventory_validates_and_the_rocm_stage_runs_on_the_amd_nodes_only(tmp_path):
    cluster = require_valid(write_inventory(tmp_path / "inv"))
    plan = make_plan(cluster, PlanOptions())
    hosts = {stage.name: list(stage.hosts) for stage in plan.stages}
    assert list(hosts).index("rocm") == list(hosts).index("nvidia") + 1
    assert hosts["rocm"] == hosts["nvidia"] == ["h01", "h02", "m01", "m02"]  # the role skips
    exported = json.loads(export_inventory(cluster, tmp_path / "out").read_text())
    vendors = {
        name: (variables or {}).get("kiln_gpu_vendor")
        for name, variables in exported["all"]["hosts"].items()
    }
    assert vendors == {"ctl01": None, "h01": None, "h02": None, "m01": "amd", "m02": "amd"}
    assert exported["all"]["vars"]["kiln_versions"]["rocm"] == "6.2.4"


def test_an_inventory_without_amd_nodes_has_no_rocm_stage_and_refuses_it_by_name(tmp_path):
    root = tmp_path / "inv"
    write_inventory(root, rocm=None)
    text = (root / "hosts.yml").read_text().replace("mi300x", "h100-sxm")
    (root / "hosts.yml").write_text(text)
    cluster = require_valid(root)
    assert "rocm" not in [stage.name for stage in make_plan(cluster, PlanOptions()).stages]
    assert "rocm" not in json.loads(export_inventory(cluster, tmp_path / "o").read_text())[
        "all"]["vars"].get("kiln_versions", {})  # fmt: skip
    with pytest.raises(InvalidInputError, match="no compute node of this inventory has amd GPUs"):
        make_plan(cluster, PlanOptions(stages=tuple(select_stages("rocm"))))


@pytest.mark.parametrize(
    ("rocm", "amd_os", "message"),
    [
        (None, "ubuntu-24.04", "m01: mi300x GPUs need kiln_versions.rocm (one of: 6.2.4"),
        ("6.1.0", "ubuntu-24.04", "ROCm 6.1.0 is not in the compatibility table"),
        ("6.2.4", "rhel-9", "kiln installs ROCm on ubuntu-22.04, ubuntu-24.04"),
    ],
)
def test_validate_refuses_what_the_rocm_stage_could_not_install(tmp_path, rocm, amd_os, message):
    errors = [
        f.message for f in load_cluster(write_inventory(tmp_path / "inv", rocm, amd_os)).errors
    ]
    assert any(message in e for e in errors), errors
    assert not any(e.startswith(("h01", "h02")) for e in errors)  # the NVIDIA nodes are fine


@pytest.mark.parametrize("role", ["nvidia_driver", "nvidia_dcgm", "nvidia_cuda", "nccl", "power"])
def test_nvidia_roles_see_no_gpus_on_an_amd_node(role):
    key = f"{role}_gpu_count"
    amd = render_role_defaults(role, {"kiln_gpu_count": 8, "kiln_gpu_vendor": "amd"}, [key])
    nvidia = render_role_defaults(role, {"kiln_gpu_count": 8}, [key])
    assert (str(amd[key]).strip(), str(nvidia[key]).strip()) == ("0", "8")


def test_the_rocm_role_sees_gpus_on_amd_nodes_only():
    amd = render_role_defaults("rocm", {"kiln_gpu_count": 8, "kiln_gpu_vendor": "amd"},
                               ["rocm_gpu_count"])  # fmt: skip
    nvidia = render_role_defaults("rocm", {"kiln_gpu_count": 8}, ["rocm_gpu_count"])
    assert (str(amd["rocm_gpu_count"]).strip(), str(nvidia["rocm_gpu_count"]).strip()) == (
        "8",
        "0",
    )


def test_the_repositories_of_a_release_on_ubuntu():
    release = rocm_release(UBUNTU_2204, "6.2.4")
    assert release == {
        "release": "6.2.4", "suite": "jammy", "build": "60204", "amdgpu": "6.8.5",
        "amdgpu_path": "amdgpu/6.2.4/ubuntu", "rocm_path": "rocm/apt/6.2.4",
    }  # fmt: skip
    assert packed_build("6.3") == "60300"
    assert rocm_release(DEBIAN_13, "6.2.4", suite="jammy")["suite"] == "jammy"  # a mirror's
    with pytest.raises(PlatformError, match="no ROCm repository for debian-13"):
        rocm_release(DEBIAN_13, "6.2.4")
    with pytest.raises(PlatformError, match="ROCm 5.7.1 is not in kiln's compatibility table"):
        rocm_release(UBUNTU_2204, "5.7.1")


def listing(*rows: tuple[str, str]) -> str:
    return "".join(f"{name}\t{version}\tinstalled\n" for name, version in rows)


def test_installed_packages_are_checked_against_the_declared_release():
    release = rocm_release(UBUNTU_2204, "6.2.4")
    names = ["amdgpu-dkms", "rocm-core", "rocm-smi-lib"]
    good = listing(("amdgpu-dkms", "1:6.8.5.60204-2111901.22.04"),
                   ("rocm-core", "6.2.4.60204-139~22.04"),
                   ("rocm-smi-lib", "7.3.0.60204-139~22.04"))  # fmt: skip
    assert installed_problems(good, release, names) == []
    assert action(good, "6.2.4")["installed"] == "6.2.4"
    older = good.replace("7.3.0.60204", "7.0.0.60100")
    assert installed_problems(older, release, names) == [
        "rocm-smi-lib 7.0.0.60100-139~22.04 is not of ROCm 6.2.4 (build 60204)"
    ]
    missing = "rocm-core\t6.2.4.60204-139~22.04\tinstalled\namdgpu-dkms\t\tnot-installed\n"
    assert installed_problems(missing, release, names) == [
        "amdgpu-dkms is not installed", "rocm-smi-lib is not installed"
    ]  # fmt: skip
    assert action("", "6.2.4")["installed"] is None


def test_an_older_release_is_moved_whole_a_newer_one_refused():
    """The upgrade moves every package of the old release's build (a dependency apt pulled in
    too); apt takes no release back, so a newer one installed is refused, naming both."""
    old = listing(("rocm-core", "6.2.4.60204-139~22.04"), ("hsa-rocr", "1.14.0.60204-139~22.04"),
                  ("libc6", "2.39-0ubuntu8"))  # fmt: skip
    assert action("", "6.2.4") == {"action": "install", "installed": None, "packages": []}
    assert action(old, "6.2.4")["action"] == "none"
    assert action(old, "6.3.3") == {
        "action": "upgrade", "installed": "6.2.4", "packages": ["rocm-core", "hsa-rocr"]
    }  # fmt: skip
    back = action(old.replace("6.2.4.60204", "6.4.1.60401").replace("60204", "60401"), "6.2.4")
    assert (back["action"], back["installed"]) == ("refuse", "6.4.1")
    assert "newer than the declared 6.2.4" in back["why"]
    assert release_packages(old, "6.2.4") == ["rocm-core", "hsa-rocr"]
    assert release_packages(old, "6.3.3") == []


def test_every_rocm_release_is_published_for_a_suite_kiln_maps_an_os_to():
    table = load_compat()
    suites = set(table.rocm_platforms.values())
    for release in table.rocm.values():
        assert set(release.suites) <= suites or set(release.suites) & suites


def test_gres_conf_has_slurm_detect_the_amd_gpus_and_check_them_against_the_inventory(tmp_path):
    """gres.conf(5): AutoDetect on a NodeName line applies to those nodes; File and a Type that
    is a substring of the detected name sanity-check what gpu/rsmi finds (a mismatch drains)."""
    plan = make_plan(require_valid(write_inventory(tmp_path / "inv")))
    files = {f.name: f.content for f in plan.files}
    lines = [line for line in files["gres.conf"].splitlines() if line.startswith("NodeName=")]
    assert lines == [
        "NodeName=h[01-02] Name=gpu Type=h100 File=/dev/nvidia[0-7]",
        "NodeName=m[01-02] AutoDetect=rsmi Name=gpu Type=mi300x File=/dev/dri/renderD[128-135]",
    ]
    slurm_conf = files["slurm.conf"]
    assert "NodeName=m[01-02] " in slurm_conf and "Gres=gpu:mi300x:8" in slurm_conf


def test_slurmd_gets_the_rsmi_plugin_on_amd_nodes_only():
    from kiln.artifacts.scope import environment

    role = Path(__file__).parents[2] / "playbooks/roles/slurm_node/vars"
    names = {**yaml.safe_load((role / "Debian.yml").read_text()),
             **yaml.safe_load((role / "main.yml").read_text())}  # fmt: skip
    render = environment().from_string(names["__slurm_node_install_packages"]).render
    amd = render({**names, "__slurm_node_amd": True})
    assert amd == {"distribution": ["slurmd", "slurm-wlm-rsmi-plugin"],
                   "repository": ["slurm-smd-slurmd"]}  # fmt: skip
    assert render({**names, "__slurm_node_amd": False}) == names["__slurm_node_packages"]


def test_health_counts_an_amd_nodes_gpus_and_never_asks_nvidia_smi():
    """An AMD Instinct node's health check: amdgpu's render nodes counted by PCI vendor, the
    checks with no AMD reading yet said unchecked (never a failure, never a drain)."""
    from kiln.health import checks
    from kiln.health.expect import expectations
    from kiln.health.node import Probes

    expect = expectations("m01", "mi300x", 8, [])
    assert expect["gpu"] == {"model": "mi300x", "count": 8, "vendor": "amd"}
    probes = [name for name, _ids, _call in Probes(expect, {}, 5).plan(set(checks.CHECKS))]
    assert "amd_gpu" in probes and not {"gpu", "nvlink", "xid", "fabric_manager"} & set(probes)
    aspeed, amd = "0x1a03\n", "0x1002\n"  # a BMC's render node is not a GPU
    healthy = checks.amd_gpu_findings([aspeed] + [amd] * 8, expect)
    assert [(f.check, f.ok) for f in healthy] == [("gpu_count", True), ("gpu_model", None)]
    lost = checks.amd_gpu_findings([amd] * 7, expect)[0]
    assert (lost.ok, lost.reading) == (False, "7 AMD GPUs (amdgpu render nodes), expected 8")


def test_the_mirror_plan_of_an_amd_node_holds_both_of_amds_repositories(tmp_path):
    """`kiln mirror plan` walks the rocm role: both repositories of the release (one deb822 source
    of two stanzas), AMD's key, the ROCm packages, the rsmi plugin and torch's ROCm wheel."""
    from kiln.artifacts.plan import mirror_plan

    plan = mirror_plan(require_valid(write_inventory(tmp_path / "inv")))
    amd = {(a.kind, a.name, a.suite) for a in plan.artifacts if a.role in ("rocm", "")}
    assert ("repository", "https://repo.radeon.com/amdgpu/6.2.4/ubuntu", "noble main") in amd
    assert ("repository", "https://repo.radeon.com/rocm/apt/6.2.4", "noble main") in amd
    names = {(a.kind, a.name, a.source) for a in plan.artifacts}
    assert ("file", "rocm.gpg.key", "https://repo.radeon.com/rocm/rocm.gpg.key") in names
    assert {"amdgpu-dkms", "rocm-core", "slurm-wlm-rsmi-plugin"} <= {n for _k, n, _s in names}
    assert ("wheel", "torch", "https://download.pytorch.org/whl/rocm6.2") in names
