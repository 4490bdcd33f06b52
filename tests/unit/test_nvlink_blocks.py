"""kiln_slurm.topology block (#32): a Slurm block per multi-node NVLink domain
(kiln_nvlink_domain), BlockSizes from the smallest domain, validate's refusals (a compute node of
no domain, a domain smaller than the base block, which slurmctld 24.11 refuses to start with,
Slurm before 24.05) and its warning when one drained tray leaves a rack short of a base block."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from captures import shared_capture
from kiln.fabric.blocks import block_name, block_sizes, nvlink_blocks
from kiln.inventory import load_cluster
from kiln.parsers.nvidia_smi import parse_xml
from kiln.plan import PlanOptions, make_plan

ROOT = Path(__file__).resolve().parents[2]


def nvl72_inventory(root: Path, racks: dict[str, int], slurm: dict | None = None) -> Path:
    """GB200 trays as CPU-only sandbox-like nodes (the rules read only names and domains):
    racks: domain -> trays."""
    compute = {}
    for rack, (domain, trays) in enumerate(racks.items(), 1):
        for tray in range(1, trays + 1):
            compute[f"gb{rack}{tray:02d}"] = {
                "ansible_host": f"10.0.{rack}.{tray}",
                "kiln_gpu_model": "none",
                "kiln_nvlink_domain": domain,
            }
    hosts = {"all": {"children": {
        "kiln_controllers": {"hosts": {"ctl": {"ansible_host": "10.0.0.1"}}},
        "kiln_compute": {"hosts": compute},
    }}}  # fmt: skip
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    settings = {
        "kiln_os": "debian-13",
        "kiln_versions": {"slurm": "24.11"},
        "kiln_slurm": {"topology": "block", **(slurm or {})},
    }
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump(settings, sort_keys=False))
    return root


def files(root: Path) -> dict[str, str]:
    cluster = load_cluster(root).cluster
    return {f.name: f.content for f in make_plan(cluster, PlanOptions()).files}


def test_two_nvl72_racks_make_two_blocks_and_their_aggregate(tmp_path):
    root = nvl72_inventory(tmp_path, {"rack-a": 18, "rack-b": 18})
    rendered = files(root)
    lines = [line for line in rendered["topology.conf"].splitlines() if not line.startswith("#")]
    assert lines == [
        "BlockName=nvl-rack-a Nodes=gb[101-118]",
        "BlockName=nvl-rack-b Nodes=gb[201-218]",
        "BlockSizes=18,36",
    ]
    assert "TopologyPlugin=topology/block" in rendered["slurm.conf"]
    assert "TopologyPlugin=topology/tree" not in rendered["slurm.conf"]


def test_the_base_block_is_the_smallest_rack_unless_declared(tmp_path):
    # A tray out for repair (17 left): the base block follows, or slurmctld would not start.
    short = nvl72_inventory(tmp_path / "a", {"rack-a": 18, "rack-b": 17, "rack-c": 18})
    topology = nvlink_blocks(load_cluster(short).cluster)
    assert (topology.base, topology.sizes, topology.spare) == (17, (17, 34), 0)
    spared = nvl72_inventory(tmp_path / "b", {"rack-a": 18, "rack-b": 18}, {"block_base": 16})
    topology = nvlink_blocks(load_cluster(spared).cluster)
    assert (topology.base, topology.sizes, topology.spare) == (16, (16, 32), 2)
    assert block_sizes(16, 5) == (16, 32, 64)


def test_a_full_base_block_is_a_warning_naming_the_spare_setting(tmp_path):
    result = load_cluster(nvl72_inventory(tmp_path, {"rack-a": 18, "rack-b": 18}))
    assert result.ok
    (warning,) = [w for w in result.warnings if w.key == "kiln_slurm.block_base"]
    assert "one drained node there and a job with --segment=18 cannot run in it" in warning.message
    assert warning.hint == "kiln_slurm.block_base: 17 keeps a spare node in every domain"
    spared = nvl72_inventory(tmp_path / "b", {"rack-a": 18, "rack-b": 18}, {"block_base": 17})
    assert not [w for w in load_cluster(spared).warnings if w.key == "kiln_slurm.block_base"]


def test_validate_refuses_what_slurmctld_would(tmp_path):
    too_big = nvl72_inventory(tmp_path / "a", {"rack-a": 18, "rack-b": 16}, {"block_base": 17})
    errors = [f.message for f in load_cluster(too_big).errors]
    assert errors == [
        "NVLink domain rack-b has 16 compute node(s), fewer than the base block of 17: "
        "slurmctld refuses to start (children count lower than bblock_node_cnt)"
    ]
    homeless = nvl72_inventory(tmp_path / "b", {"rack-a": 2})
    hosts = yaml.safe_load((homeless / "hosts.yml").read_text())
    del hosts["all"]["children"]["kiln_compute"]["hosts"]["gb102"]["kiln_nvlink_domain"]
    (homeless / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (error,) = load_cluster(homeless).errors
    assert error.key == "kiln_nvlink_domain" and "gb102" in error.message
    old = nvl72_inventory(tmp_path / "c", {"rack-a": 2})
    settings = yaml.safe_load((old / "group_vars" / "all.yml").read_text())
    settings.update(kiln_os="ubuntu-24.04", kiln_versions={"slurm": "23.11"})
    (old / "group_vars" / "all.yml").write_text(yaml.safe_dump(settings))
    messages = [f.message for f in load_cluster(old).errors]
    assert any("topology/block with BlockSizes" in m and "needs Slurm 24.05" in m for m in messages)


def test_a_domain_as_nvidia_smi_names_it_is_a_block_slurm_can_read():
    # The GB200 tray's own identity (nvidia-smi -q -x: ClusterUUID.CliqueId, a real capture).
    capture = "nvidia-smi-q-x/gb200_4gpu_p6e_arm64_fabric_completed_clique2_k8stestinfra.xml"
    (domain,) = {gpu.nvlink_domain for gpu in parse_xml(shared_capture(capture).read_text()).gpus}
    assert domain == "00000001-0000-0000-0000-000000000001.2"
    assert block_name(domain) == "nvl-00000001-0000-0000-0000-000000000001-2"


def test_racks_and_fabric_topologies_are_unchanged(tmp_path):
    root = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "sandbox", root)
    assert "TopologyPlugin=topology/block" not in files(root)["slurm.conf"]


def gb200_inventory(root: Path, slurm: str, os_release: str, domain: bool = True) -> Path:
    tray = {"ansible_host": "10.0.1.1", "kiln_gpu_model": "gb200", "kiln_arch": "aarch64"}
    if domain:
        tray["kiln_nvlink_domain"] = "rack-a"
    hosts = {"all": {"children": {
        "kiln_controllers": {"hosts": {"ctl": {"ansible_host": "10.0.0.1"}}},
        "kiln_compute": {"hosts": {"gb101": tray}},
    }}}  # fmt: skip
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    settings = {
        "kiln_os": os_release,
        "kiln_versions": {"slurm": slurm, "driver_branch": 580, "cuda": "13.0", "nccl": "2.27.7"},
    }
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump(settings, sort_keys=False))
    return root


def test_gb200_on_a_slurm_before_24_05_is_refused_naming_both(tmp_path):
    old = gb200_inventory(tmp_path / "a", "22.05", "debian-12")
    tray = [e for e in load_cluster(old).errors if e.key == "kiln_versions.slurm"]
    assert [e.message for e in tray if e.message.startswith("gb200")] == [
        "gb200 trays (gb101) need Slurm 24.05 or newer (switch/nvidia_imex, topology/block); "
        "the cluster's Slurm is 22.05"
    ]
    new = gb200_inventory(tmp_path / "b", "24.11", "debian-13")
    assert not [e for e in load_cluster(new).errors if e.message.startswith("gb200")]
    unnamed = gb200_inventory(tmp_path / "c", "24.11", "debian-13", domain=False)
    (warning,) = [w for w in load_cluster(unnamed).warnings if w.key == "kiln_nvlink_domain"]
    assert "1 NVL72 tray(s) name no kiln_nvlink_domain (gb101)" in warning.message


def test_the_tray_profiles_carry_what_real_captures_report():
    from kiln.profiles import get_profile

    for model, capture, watts in (
        ("gb200", "gb200_4gpu_p6e_arm64_fabric_completed_clique2_k8stestinfra.xml", 1200),
        ("gb300", "gb300_4gpu_fabric_completed_clique32766_k8stestinfra.xml", 1400),
    ):
        profile = get_profile(model)
        gpus = parse_xml(shared_capture(f"nvidia-smi-q-x/{capture}").read_text()).gpus
        assert {gpu.product_name for gpu in gpus} == set(profile.product_names)
        assert len(gpus) == profile.gpu_count_default == 4
        assert {gpu.power.default_limit_w for gpu in gpus} == {profile.power_limit_default_w}
        assert profile.power_limit_max_w == watts and profile.nvlink_domain_nodes == 18
        assert not profile.fabric_manager_required  # no NVSwitch in a tray
        assert {gpu.memory_total_mib // 1024 for gpu in gpus} == {profile.memory_gib}
