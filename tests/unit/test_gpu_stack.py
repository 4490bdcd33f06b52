"""kiln.gpu: the decisions of the nvidia and nccl stages, against recorded real outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from captures import shared_capture
from kiln.gpu.facts import (
    Expected,
    check,
    fabric_pending,
    load_failure_cause,
    pack,
    summary_from_packed,
    unpack,
)
from kiln.gpu.filters import FILTERS, gpu_profile
from kiln.gpu.packages import (
    branch_of,
    candidates,
    cuda_toolkit_package,
    driver_action,
    installed_packages,
    installed_stack_problems,
    nccl_package_version,
    offered_branches,
    stack_versions,
    upstream_version,
)
from kiln.gpu.rails import rail_check, topology_from_packed
from kiln.gpu.trust import key_problem, primary_fingerprints
from kiln.parsers import ParseError

FIXTURES = Path(__file__).parents[1] / "fixtures"
SMI = FIXTURES / "real" / "nvidia-smi-q-x"
V100S_8 = SMI / "tesla_v100s_pcie_32gb_8gpu_datakit.xml"
A100_MIG = shared_capture("nvidia-smi-q-x/a100_sxm4_80gb_mig_telegraf.xml")
GPG = FIXTURES / "gpg"
NVLINK = FIXTURES / "real" / "nvidia-smi-nvlink"
V100_BAD_LINKS = NVLINK / "v100_sxm2_7gpu_inactive_links_azhpc.txt"
H100_BRIDGE = NVLINK / "h100_pcie_2gpu_nvlink_bridge_hpe.txt"
A10_TEXT = FIXTURES / "real" / "nvidia-smi-q" / "a10_q_remapped_rows_pending_drv535_gpud.txt"
H100_TEXT = FIXTURES / "real" / "nvidia-smi-q" / "h100_80gb_hbm3_8gpu_q_drv535_gpud.txt"
TOPO = FIXTURES / "real" / "nvidia-smi-topo-m"
TOPO_8NIC = TOPO / "h100_sxm_8nic_pix_nic_legend_drv570_sglang.txt"
TOPO_12NIC = TOPO / "h100_hgx_12nic_ib_and_eth_nic_legend_mooncake.txt"
TOPO_DGX_A100 = shared_capture("nvidia-smi-topo-m/dgx_a100_oci_mlx5_columns.txt")
TOPO_PCIE = TOPO / "rtx6000ada_4gpu_4nic_asus_esc8000a_nic_legend.txt"
TOPO_SWAPPED = (
    FIXTURES / "derived" / "nvidia-smi-topo-m" / "h100_sxm_8nic_mlx5_3_and_mlx5_5_swapped.txt"
)


def _summary(path: Path) -> dict:
    return summary_from_packed(pack(path.read_text()))


# --- nvidia-smi -q -x -> summary -> verdict -------------------------------------------------


def test_packing_round_trips_and_shrinks_the_xml():
    text = V100S_8.read_text()
    packed = pack(text)
    assert unpack(packed) == text
    assert len(packed) < len(text) / 5  # what every run's events carry per node


def test_unreadable_packed_output_names_the_tool():
    with pytest.raises(ParseError, match="nvidia-smi -q -x: packed output is unreadable"):
        unpack("not base64 at all!")


def test_summary_of_a_real_8_gpu_node():
    summary = _summary(V100S_8)
    assert summary["driver_version"] == "460.73.01"
    assert summary["cuda_version"] == "11.2"
    assert summary["gpu_count"] == summary["attached_gpus"] == 8
    gpus = summary["gpus"]
    assert {gpu["product_name"] for gpu in gpus} == {"Tesla V100S-PCIE-32GB"}
    assert len({gpu["serial"] for gpu in gpus}) == 8
    assert all(gpu["uuid"].startswith("GPU-") for gpu in gpus)
    assert gpus[0]["pci_bus_id"] == "00000000:00:0D.0"
    assert gpus[0]["power_default_limit_w"] == 250.0


def test_healthy_node_matching_its_declaration_has_no_problems():
    expected = Expected(
        gpu_count=8, product_names=("Tesla V100S-PCIE-32GB",), driver_version="460.73.01"
    )
    assert check(_summary(V100S_8), expected) == []
    # A branch prefix matches too; another branch does not.
    assert check(_summary(V100S_8), Expected(gpu_count=8, driver_version="460")) == []
    assert check(_summary(V100S_8), Expected(gpu_count=8, driver_version="46")) == [
        "driver 460.73.01 is loaded, expected 46"
    ]


def test_fewer_gpus_than_attached_and_declared_is_named_with_both_counts():
    problems = check(_summary(A100_MIG), Expected(gpu_count=4))
    assert problems == ["the driver sees 1 GPUs (4 attached), the inventory declares 4"]


def test_wrong_model_and_driver_are_each_named():
    problems = check(
        _summary(V100S_8),
        Expected(gpu_count=8, product_names=("NVIDIA H100 80GB HBM3",), driver_version="550"),
    )
    assert problems == [
        "driver 460.73.01 is loaded, expected 550",
        "GPU model Tesla V100S-PCIE-32GB is not the declared one (NVIDIA H100 80GB HBM3)",
    ]


def _with(summary: dict, index: int, **fields) -> dict:
    gpus = [dict(gpu) for gpu in summary["gpus"]]
    gpus[index].update(fields)
    return {**summary, "gpus": gpus}


def test_unhealthy_gpus_are_named_by_index_bus_id_and_serial():
    base = _summary(V100S_8)
    serial = base["gpus"][3]["serial"]
    faulty = _with(base, 3, ecc_volatile_uncorrectable=2, retired_pages_pending=True)
    faulty = _with(faulty, 5, remapped_rows_failure=True, remapped_rows_pending=True)
    problems = check(faulty, Expected(gpu_count=8))
    assert problems == [
        f"GPU 3 (00000000:00:10.0, serial {serial}): 2 uncorrectable ECC errors",
        f"GPU 3 (00000000:00:10.0, serial {serial}): retired pages pending (reset or reboot "
        "the GPU)",
        f"GPU 5 (00000000:00:12.0, serial {base['gpus'][5]['serial']}): row remapping failed "
        "(replace the GPU)",
    ]
    assert check(faulty, Expected(gpu_count=8, health=False)) == []


def test_fabric_state_is_judged_only_on_nvswitch_systems():
    stuck = _with(_summary(V100S_8), 0, fabric_state="In Progress", fabric_status="N/A")
    assert fabric_pending(stuck) and not fabric_pending(_summary(V100S_8))
    assert check(stuck, Expected(gpu_count=8)) == []
    assert check(stuck, Expected(gpu_count=8, fabric_manager=True)) == [
        "GPU 0: NVSwitch fabric state In Progress (N/A): is nvidia-fabricmanager running?"
    ]
    done = _with(_summary(V100S_8), 0, fabric_state="Completed", fabric_status="Success")
    assert check(done, Expected(gpu_count=8, fabric_manager=True)) == []


def test_nvlink_state_of_a_real_bad_node_is_judged_on_nvswitch_systems():
    """The recorded V100 SXM2 node: GPU 7 missing from the NVLink listing, links inactive."""
    summary = summary_from_packed(pack(V100S_8.read_text()), pack(V100_BAD_LINKS.read_text()))
    nvlink = summary["nvlink"]
    assert sorted(nvlink) == [str(i) for i in range(7)]
    assert nvlink["0"] == {"links": 6, "active": 6, "inactive": [], "speed_gbs": 25.781}
    problems = check(summary, Expected(gpu_count=8, fabric_manager=True))
    assert "GPU 7: missing from nvidia-smi nvlink --status" in problems
    assert any(p.startswith("GPU 6: NVLink 1") and "inactive" in p for p in problems)
    assert check(summary, Expected(gpu_count=8)) == []  # no NVSwitch: links are not judged


def test_nvlink_bridges_on_pcie_cards_are_facts_not_faults():
    summary = summary_from_packed(pack(V100S_8.read_text()), pack(H100_BRIDGE.read_text()))
    assert [summary["nvlink"][i]["active"] for i in ("0", "1")] == [12, 12]
    assert summary["nvlink"]["0"]["speed_gbs"] == 26.562


def test_unreadable_nvlink_output_leaves_the_links_unknown():
    summary = summary_from_packed(pack(V100S_8.read_text()), pack("something else entirely\n"))
    assert summary["nvlink"] is None and "nvlink" in summary["nvlink_error"]
    assert check(summary, Expected(gpu_count=8, fabric_manager=True)) == []


def test_driver_that_does_not_answer_is_explained():
    error = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running."
    )
    assert load_failure_cause(
        kernel="6.1.0-28-amd64",
        version="550.127.05",
        smi_error=error,
        module_built=False,
        make_log_tail="line1\nerror: implicit declaration of function 'foo'\nmake: *** Error 2\n",
    ) == (
        "DKMS did not build the nvidia 550.127.05 module for kernel 6.1.0-28-amd64 (see "
        "/var/lib/dkms/nvidia/550.127.05/build/make.log): line1 | error: implicit declaration "
        "of function 'foo' | make: *** Error 2"
    )
    assert "reboot the node" in load_failure_cause(
        kernel="6.1.0-28-amd64", version="550.127.05", smi_error=error, module_built=True
    )


# --- plain-text nvidia-smi -q where the XML is not available --------------------------------


def test_text_fallback_is_summarised_and_judged_like_the_xml():
    """The real A10 whose rows wait for a reset: the same verdict the XML path gives."""
    summary = summary_from_packed("", "", pack(A10_TEXT.read_text()))
    assert summary["source"] == "nvidia-smi -q"
    assert summary["gpus"][0]["remapped_rows_pending"] is True
    assert check(summary, Expected(gpu_count=1, product_names=("NVIDIA A10",))) == [
        "GPU 0 (00000000:07:00.0, serial 1324521052681): remapped rows pending (reset or reboot "
        "the GPU)"
    ]
    healthy = summary_from_packed("", "", pack(H100_TEXT.read_text()))
    expected = Expected(
        gpu_count=8,
        product_names=("NVIDIA H100 80GB HBM3",),
        driver_version="535",
        fabric_manager=True,
    )
    assert check(healthy, expected) == []
    # The XML wins where both are there; it is what every other stage reads.
    assert (
        summary_from_packed(pack(V100S_8.read_text()), "", pack(A10_TEXT.read_text()))["source"]
        == "nvidia-smi -q -x"
    )


def test_module_falls_back_to_text_and_reads_the_matrix(tmp_path):
    """playbooks/library/kiln_nvidia_smi.py against a stand-in nvidia-smi whose -x fails."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        '  "-q -x") echo "Unknown option -x" >&2; exit 2 ;;\n'
        f'  "-q") cat "{A10_TEXT}" ;;\n'
        f'  "topo -m") cat "{TOPO_8NIC}" ;;\n'
        "  *) exit 3 ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"topology": True}}))
    module = Path(__file__).parents[2] / "playbooks" / "library" / "kiln_nvidia_smi.py"
    done = subprocess.run(
        [sys.executable, str(module), str(args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"},
        check=False,
        timeout=60,
    )
    result = json.loads(done.stdout)
    assert (result["exit_status"], result["xml_packed"], result["nvlink_packed"]) == (2, "", "")
    assert result["error"] == "Unknown option -x"
    assert unpack(result["text_packed"]) == A10_TEXT.read_text()
    assert unpack(result["topo_packed"]) == TOPO_8NIC.read_text()


# --- nvidia-smi topo -m -> rail wiring ---------------------------------------------------------

RAILS_8 = [f"mlx5_{i}" for i in range(8)]


def _topology(path: Path) -> dict:
    return topology_from_packed(pack(path.read_text()))


def test_rails_of_a_real_rail_optimised_h100_pass():
    assert rail_check(_topology(TOPO_8NIC), RAILS_8) == {
        "judged": True,
        "problems": [],
        "notes": [],
    }


def test_two_swapped_hcas_fail_naming_the_gpu_each_is_next_to():
    """Derived from the capture above: mlx5_3 and mlx5_5 in each other's slots."""
    assert rail_check(_topology(TOPO_SWAPPED), RAILS_8)["problems"] == [
        "rail 3 (mlx5_3) is SYS from GPU3; nearest GPU is GPU5 (PIX)",
        "rail 5 (mlx5_5) is SYS from GPU5; nearest GPU is GPU3 (PIX)",
    ]


def test_rails_declared_in_device_order_on_a_node_with_ethernet_ports_fail():
    """Real H100 with 12 NICs: the IB rails are mlx5_0,3,4,5,6,9,10,11 (mlx5_1,2,7,8 are
    Ethernet). Declared so, the node passes; declared as mlx5_0..7, every misplaced rail is
    named with the GPU its HCA actually serves."""
    topology = _topology(TOPO_12NIC)
    rails = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    assert rail_check(topology, rails)["problems"] == []
    assert rail_check(topology, RAILS_8)["problems"][:2] == [
        "rail 1 (mlx5_1) is NODE from GPU1; nearest GPU is GPU0 (PIX)",
        "rail 2 (mlx5_2) is NODE from GPU2; nearest GPU is GPU0 (PIX)",
    ]


def test_dgx_a100_rails_pass_and_a_storage_hca_is_named():
    """DGX A100 (older driver, no NIC Legend): two GPUs share each PCIe switch (PXB)."""
    topology = _topology(TOPO_DGX_A100)
    compute = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
    assert rail_check(topology, compute)["problems"] == []
    wrong = compute[:4] + ["mlx5_4"] + compute[5:]
    assert rail_check(topology, wrong)["problems"] == [
        "rail 4 (mlx5_4) is SYS from GPU4; no GPU is closer than SYS: is the HCA in a slot of "
        "the right PCIe switch?"
    ]
    # Four rails for eight GPUs: rail i serves GPUs 2i and 2i+1.
    assert rail_check(topology, ["mlx5_0", "mlx5_2", "mlx5_6", "mlx5_8"])["problems"] == []


def test_what_cannot_be_judged_is_noted_not_failed():
    topology = _topology(TOPO_8NIC)
    assert rail_check(None, RAILS_8)["notes"] == [
        "nvidia-smi topo -m not read: rail wiring not judged"
    ]
    assert rail_check(topology, RAILS_8 + ["mlx5_8"])["notes"] == [
        "9 rails for 8 GPUs: rail wiring not judged"
    ]
    named = rail_check(topology, ["0000:1a:00.0", "mlx5_9"])
    assert named["problems"] == []
    assert named["notes"] == [
        "rail 0 (0000:1a:00.0): topo -m names HCAs by device name, not by GUID or PCI address; "
        "not judged",
        "rail 1 (mlx5_9): not in nvidia-smi topo -m; not judged",
    ]
    unreadable = topology_from_packed(pack("nothing here\n"))
    assert "no matrix header" in rail_check(unreadable, RAILS_8)["notes"][0]
    assert rail_check(topology, [])["judged"] is False


def test_paths_that_count_as_next_to_are_overridable():
    """A PCIe server whose HCAs hang off the CPU root ports (NODE) passes once NODE is allowed."""
    topology = _topology(TOPO_PCIE)
    rails = [f"mlx5_{i}" for i in range(4)]
    assert len(rail_check(topology, rails)["problems"]) == 4
    assert FILTERS["kiln_gpu_rails"](topology, rails, ["PIX", "PXB", "NODE"])["problems"] == []
    # What Ansible hands over for a node that sent no matrix.
    assert FILTERS["kiln_gpu_rails"]("", rails)["notes"] == [
        "nvidia-smi topo -m not read: rail wiring not judged"
    ]


@pytest.mark.local
def test_preflight_role_fails_a_node_with_swapped_rails(tmp_path):
    """The preflight role through real ansible-playbook on this machine, its nvidia-smi a
    stand-in (no XML, the real A10 text, the derived swapped matrix): the node fails naming
    the pending row remap and both misplaced rails."""
    playbook_bin = Path(sys.executable).parent / "ansible-playbook"
    if not playbook_bin.exists():
        pytest.skip("ansible-playbook is not installed beside python")
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        '  "-q -x") echo "Unknown option -x" >&2; exit 2 ;;\n'
        f'  "-q") cat "{A10_TEXT}" ;;\n'
        f'  "topo -m") cat "{TOPO_SWAPPED}" ;;\n'
        "  *) exit 3 ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    play = tmp_path / "play.yml"
    play.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {
                        "kiln_gpu_model": "none",
                        "kiln_gpu_count": 1,
                        "kiln_ib_hcas": RAILS_8,
                        "preflight_check_bmc": False,
                        "preflight_check_ib": False,
                    },
                    "roles": ["preflight"],
                }
            ]
        )
    )
    playbooks = Path(__file__).parents[2] / "playbooks"
    cli = Path(__file__).parents[2] / "cli"
    done = subprocess.run(
        [str(playbook_bin), "-i", "localhost,", "-c", "local", str(play),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PATH": f"{fake.parent}:{os.environ['PATH']}",
            "PYTHONPATH": str(cli),
            "ANSIBLE_ROLES_PATH": str(playbooks / "roles"),
            "ANSIBLE_LIBRARY": f"{playbooks / 'library'}:{playbooks / 'roles/preflight/library'}",
            "ANSIBLE_FILTER_PLUGINS": str(playbooks / "filter_plugins"),
            "ANSIBLE_LOCALHOST_WARNING": "false",
        },
        check=False,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout[-2000:]
    assert (
        "GPU 0 (00000000:07:00.0, serial 1324521052681): remapped rows pending (reset or reboot "
        "the GPU); rail 3 (mlx5_3) is SYS from GPU3; nearest GPU is GPU5 (PIX); rail 5 (mlx5_5) "
        "is SYS from GPU5; nearest GPU is GPU3 (PIX)"
    ) in done.stdout


# --- packages --------------------------------------------------------------------------------

# dpkg-query's ${db:Status-Abbrev} ends in a space, as here.
DPKG = (
    "nvidia-driver 535.183.06-1 hi \n"
    "nvidia-smi 535.183.06-1 ii \n"
    "nvidia-persistenced 535.183.06-1 rc \n"
    "libnccl2 2.18.5-1+cuda12.2 hi \n"
    "cuda-toolkit-12-2 12.2.2-1 ii \n"
    "cuda-toolkit-config-common 12.6.77-1 ii \n"
)


def test_installed_packages_count_installed_and_held_only():
    assert installed_packages(DPKG) == {
        "nvidia-driver": "535.183.06-1",
        "nvidia-smi": "535.183.06-1",
        "libnccl2": "2.18.5-1+cuda12.2",
        "cuda-toolkit-12-2": "12.2.2-1",
        "cuda-toolkit-config-common": "12.6.77-1",
    }


def test_stack_versions_pick_the_toolkit_by_its_package_name():
    assert stack_versions(installed_packages(DPKG)) == {
        "driver": "535.183.06-1",
        "cuda": "12.2",
        "nccl": "2.18.5-1+cuda12.2",
    }


@pytest.mark.parametrize(
    ("version", "branch", "upstream"),
    [
        ("535.183.06-1", 535, "535.183.06"),
        ("535.216.01-1~deb12u1", 535, "535.216.01"),
        ("1:550.127.05-0ubuntu1", 550, "550.127.05"),
        ("", None, ""),
    ],
)
def test_versions_split_into_branch_and_upstream(version, branch, upstream):
    assert branch_of(version) == branch
    assert upstream_version(version) == upstream


def test_driver_action_from_what_is_installed():
    assert driver_action(None, 550)["action"] == "install"
    assert driver_action("550.127.05-1", 550)["action"] == "none"
    plan = driver_action("535.183.06-1", 550)
    assert plan == {
        "action": "upgrade",
        "from_branch": 535,
        "to_branch": 550,
        "installed": "535.183.06-1",
    }
    assert driver_action("570.86.15-1", 550)["action"] == "upgrade"  # downgrades drain too


MADISON = """\
nvidia-driver | 550.127.05-1 | http://mirror.example:8080  Packages
nvidia-driver | 550.90.07-1 | http://mirror.example:8080  Packages
nvidia-driver | 535.183.06-1 | http://mirror.example:8080  Packages
nvidia-driver | 535.309.01-0+deb12u1 | http://deb.debian.org/debian bookworm/non-free amd64 Packages
"""


def test_candidates_are_the_branch_newest_first_from_the_named_repository():
    assert candidates(MADISON, 550) == ["550.127.05-1", "550.90.07-1"]
    assert candidates(MADISON, 535) == ["535.309.01-0+deb12u1", "535.183.06-1"]
    # With the repository named, Debian's own nvidia-driver is not a candidate.
    assert candidates(MADISON, 535, "http://mirror.example:8080/") == ["535.183.06-1"]
    assert candidates(MADISON, 570) == []
    assert offered_branches(MADISON) == [535, 550]


def test_package_versions_of_nccl_and_cuda():
    assert nccl_package_version("2.18.5", "12.2") == "2.18.5-1+cuda12.2"
    assert cuda_toolkit_package("12.8") == "cuda-toolkit-12-8"


def test_installed_combinations_the_table_rejects_name_both_versions():
    assert installed_stack_problems("535.183.06-1", "12.2", "2.18.5-1+cuda12.2") == []
    assert installed_stack_problems("535.183.06-1", "12.4", "2.20.5-1+cuda12.4") == [
        "CUDA 12.4 is installed but driver 535.183.06 (branch 535) runs CUDA 12.2 at most"
    ]
    assert installed_stack_problems("550.127.05-1", "12.4", "2.18.5-1+cuda12.2") == [
        "NCCL 2.18.5 is built for CUDA 12.2 but CUDA 12.4 is installed"
    ]
    assert installed_stack_problems(None, None, None) == []


# --- repository keys -------------------------------------------------------------------------


def test_fingerprint_of_a_single_key():
    colons = (GPG / "one-key.colons").read_text()
    [fingerprint] = primary_fingerprints(colons)
    assert len(fingerprint) == 40
    assert key_problem(colons, fingerprint.lower(), "https://mirror/key.pub") is None


def test_a_file_with_other_or_extra_keys_is_refused():
    colons = (GPG / "debian-archive-keyring.colons").read_text()
    found = primary_fingerprints(colons)
    assert len(found) == colons.count("\npub:") + colons.startswith("pub:")  # subkeys skipped
    problem = key_problem(colons, found[0], "https://mirror/key.pub")
    assert problem is not None and f"not the pinned {found[0]}" in problem
    assert key_problem("", found[0], "https://mirror/key.pub") == (
        "https://mirror/key.pub holds no OpenPGP public key"
    )


# --- what the roles look up ------------------------------------------------------------------


def test_gpu_profile_tells_the_roles_what_the_model_needs():
    assert gpu_profile("h100-sxm")["fabric_manager"] is True
    assert gpu_profile("b200")["open_kernel_modules"] is True
    assert gpu_profile("h100-pcie")["fabric_manager"] is False
    assert gpu_profile("none") == {
        "is_gpu": False,
        "fabric_manager": False,
        "open_kernel_modules": False,
        "product_names": [],
        "min_driver_branch": None,
    }


def test_every_filter_the_roles_use_exists():
    roles = Path(__file__).parents[2] / "playbooks"
    used = set()
    for path in roles.rglob("*.yml"):
        text = path.read_text()
        used |= {name for name in FILTERS if name in text}
    assert used == set(FILTERS)
