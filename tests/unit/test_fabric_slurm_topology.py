"""kiln_slurm.topology: fabric — the Slurm stage's topology.conf from a stored ibnetdiscover
capture instead of the racks, and how validation judges that capture (file:line findings)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from captures import shared_capture
from kiln.app import main
from kiln.inventory import load_cluster, require_valid
from kiln.plan import make_plan

FABRIC = Path(__file__).parent.parent / "fixtures" / "fabric"
THREE = FABRIC / "three_level_fat_tree.ibnetdiscover"
GOLDEN = FABRIC / "golden" / "topology-3level.conf"
SLURM = "kiln_slurm:\n  topology: fabric\n  ibnetdiscover_file: {path}\n"


def inventory(tmp_path: Path, path: str = "fabric/ibnetdiscover.txt", capture=THREE) -> Path:
    """The 3-level fabric's inventory (gpu001-gpu017, gpu017 absent from the fabric) with the
    capture stored beside its hosts."""
    root = tmp_path / "inv"
    shutil.copytree(FABRIC / "inventory-3level", root)
    if capture is not None:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(capture, target)
    with (root / "group_vars" / "all.yml").open("a") as all_vars:
        all_vars.write(SLURM.format(path=path))
    return root


def body(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def findings(root: Path) -> list[tuple[str, str, str, str]]:
    result = load_cluster(root)
    return [
        (str(f.level), f.origin.display(result.path) if f.origin else "", f.key or "", f.message)
        for f in result.findings
    ]


def test_plan_renders_topology_conf_from_the_fabric_not_the_racks(tmp_path):
    cluster = require_valid(inventory(tmp_path))
    conf = next(f for f in make_plan(cluster).files if f.name == "topology.conf").content
    assert body(conf) == body(GOLDEN.read_text())  # the switches as cabled, three levels
    assert "(fabric/ibnetdiscover.txt): 4 switch levels, leaves first." in conf
    # The racks would have put gpu008 under leaf-r03: the fabric has it with gpu005-gpu007.
    assert "SwitchName=P1-SU2-IBLEAF-R0 Nodes=gpu[005-008]" in conf
    # Not in the fabric (validation warned): under a leaf of its own, still schedulable.
    assert "SwitchName=kiln-not-in-fabric Nodes=gpu017" in conf
    assert "SwitchName=kiln-top Switches=CORE-01,CORE-02,kiln-not-in-fabric" in conf


def test_the_capture_is_parsed_once_while_validating(tmp_path):
    root = inventory(tmp_path)
    cluster = require_valid(root)
    (root / "fabric" / "ibnetdiscover.txt").unlink()  # rendering must not read it again
    conf = next(f for f in make_plan(cluster).files if f.name == "topology.conf").content
    assert body(conf) == body(GOLDEN.read_text())


def test_kiln_plan_writes_it_and_provision_uses_the_same_renderer(tmp_path, capsys):
    root = inventory(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["plan", str(root), "--output", str(tmp_path / "out"), "--json"])
    assert exited.value.code == 0
    capsys.readouterr()
    assert body((tmp_path / "out" / "topology.conf").read_text()) == body(GOLDEN.read_text())
    racks = require_valid(FABRIC / "inventory-3level")
    conf = next(f for f in make_plan(racks).files if f.name == "topology.conf").content
    assert "SwitchName=leaf-r03 Nodes=gpu[008-012]" in conf  # the default: racks


def test_a_node_the_capture_lacks_is_a_warning_at_the_key(tmp_path):
    (warning,) = [f for f in findings(inventory(tmp_path)) if f[0] == "warning"]
    assert warning[1:3] == ("group_vars/all.yml:12", "kiln_slurm")  # the ibnetdiscover_file line
    assert "lacks 1 compute node(s): gpu017" in warning[3]


def test_a_missing_capture_is_an_error_at_the_key(tmp_path):
    (error,) = [f for f in findings(inventory(tmp_path, capture=None)) if f[0] == "error"]
    assert error[1:3] == ("group_vars/all.yml:12", "kiln_slurm")  # the ibnetdiscover_file line
    assert error[3].startswith("kiln_slurm.ibnetdiscover_file fabric/ibnetdiscover.txt: cannot")


def test_a_capture_that_does_not_parse_is_an_error_at_its_own_line(tmp_path):
    bad = tmp_path / "bad.txt"
    lines = THREE.read_text().splitlines(keepends=True)
    broken = next(i for i, line in enumerate(lines) if line.startswith("Switch"))
    lines[broken] = "Switch 36 garbled\n"
    bad.write_text("".join(lines))
    found = [f for f in findings(inventory(tmp_path, capture=bad)) if f[0] == "error"]
    assert [f[1:3] for f in found] == [(f"fabric/ibnetdiscover.txt:{broken + 1}", "kiln_slurm")]
    assert "is not ibnetdiscover output" in found[0][3]


def test_another_fabrics_capture_and_an_ansible_readable_name(tmp_path):
    other = shared_capture("ibnetdiscover/dgx_h100_superpod_ndr_mqm9701_truncated.txt")
    root = inventory(tmp_path, path="fabric.ibnetdiscover", capture=other)
    found = {(f[0], f[3].split(":")[0].split(" (")[0]) for f in findings(root)}
    assert ("error", "kiln_slurm.ibnetdiscover_file fabric.ibnetdiscover holds none of the "
            "compute nodes") in found  # fmt: skip
    assert ("warning", "Ansible reads every file in an inventory directory as an inventory "
            "source, fabric.ibnetdiscover included") in found  # fmt: skip


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("kiln_slurm:\n  topology: fabric\n", "topology fabric needs ibnetdiscover_file"),
        ("kiln_slurm:\n  ibnetdiscover_file: x.txt\n", "ibnetdiscover_file is set but topology"),
        ("kiln_slurm:\n  topology: switches\n", "kiln_slurm.topology"),
        ("kiln_slurm:\n  topology: fabric\n  ibnetdiscover_file: a b.txt\n", "a path of letters"),
    ],
)
def test_the_settings_themselves(tmp_path, capsys, written, message):
    root = tmp_path / "inv"
    shutil.copytree(FABRIC / "inventory-3level", root)
    with (root / "group_vars" / "all.yml").open("a") as all_vars:
        all_vars.write(written)
    with pytest.raises(SystemExit) as exited:
        main(["validate", "--json", str(root)])
    assert exited.value.code == 2
    errors = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["level"] == "error"]
    assert [(f["file"], f["key"]) for f in errors] == [("group_vars/all.yml", "kiln_slurm")]
    assert message in errors[0]["message"]


# --- TopologyPlugin on whenever topology.conf is written with content (issue 16) -------------

REAL = FABRIC.parent / "real" / "ibnetdiscover"
LINKED = REAL / "switchib_sx6012_edr_fdr_linked_switches_query_smp_timeout.txt"
ONE_RACK = """---
all:
  children:
    kiln_controllers:
      hosts:
        ctl01: {ansible_host: 10.0.0.10}
    kiln_compute:
      vars: {kiln_gpu_model: h100-sxm, kiln_ib_hcas: [HCA-1], kiln_rack: r01}
      hosts:
        r-ufm96:
        r-ufm100:
        r-ufm101:
        r-ufm111:
        r-ufm216:
"""


def one_rack(tmp_path: Path, text: str | None = None) -> Path:
    """The five hosts of the real SwitchIB + SX6012 capture, all in one rack (one leaf), with
    `text` (default: that capture) stored as the fabric."""
    root = tmp_path / "one-rack"
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(ONE_RACK)
    (root / "group_vars" / "all.yml").write_text(
        (FABRIC / "inventory-3level" / "group_vars" / "all.yml")
        .read_text()
        .replace("opensm_hosts: [gpu001, gpu009]", "opensm_hosts: [r-ufm101]")
        .replace("link_rate_gbps: 400", "link_rate_gbps: 100")
    )
    (root / "fabric.txt").write_text(LINKED.read_text() if text is None else text)
    with (root / "group_vars" / "all.yml").open("a") as all_vars:
        all_vars.write(SLURM.format(path="fabric.txt"))
    return root


def files(root: Path) -> dict[str, str]:
    return {f.name: f.content for f in make_plan(require_valid(root)).files}


def test_the_topology_plugin_is_on_when_the_fabric_gives_topology_conf(tmp_path):
    # The racks give one leaf, so the plugin used to stay off and the fabric's topology.conf
    # was written and ignored.
    without_diagnostic = LINKED.read_text().split("\n", 1)[1]
    rendered = files(one_rack(tmp_path, without_diagnostic))
    assert "SwitchName=" in rendered["topology.conf"]
    assert "TopologyPlugin=topology/tree" in rendered["slurm.conf"]


def test_a_diagnostic_line_is_a_warning_at_its_own_line_and_the_capture_still_serves(tmp_path):
    root = one_rack(tmp_path)  # the real capture, libibmad's timeout on line 1
    found = findings(root)
    assert [f for f in found if f[0] == "error"] == []
    (warning,) = [f for f in found if f[0] == "warning"]
    assert warning[1:3] == ("fabric.txt:1", "kiln_slurm")
    assert warning[3].startswith("kiln_slurm.ibnetdiscover_file fabric.txt: line 1 skipped ")
    assert "bad status 110; Connection timed out" in warning[3]
    rendered = files(root)
    assert (
        "SwitchName=kiln-top Switches=switch-de779e,switch-e41d2d030003e470"
        in (rendered["topology.conf"])
    )
    assert "TopologyPlugin=topology/tree" in rendered["slurm.conf"]


def test_many_skipped_lines_are_summed_up_after_the_first_few(tmp_path):
    timeout = LINKED.read_text().split("\n", 1)[0]
    root = one_rack(tmp_path, "\n".join([timeout] * 8) + "\n" + LINKED.read_text())
    warnings = [f for f in findings(root) if f[0] == "warning"]
    assert [w[1] for w in warnings] == [f"fabric.txt:{n}" for n in range(1, 7)]
    assert "4 more line(s) skipped (lines 6-9)" in warnings[-1][3]


def test_a_capture_with_nothing_usable_or_no_switch_is_an_error(tmp_path):
    failed = (REAL / "failed_cannot_open_mad_port.txt").read_text()
    (error,) = [f for f in findings(one_rack(tmp_path / "a", failed)) if f[0] == "error"]
    assert error[1:3] == ("fabric.txt:3", "kiln_slurm")  # the line that says why
    assert "no switch or CA found" in error[3]
    lone = (REAL / "dgx_gb200_one_ca_no_link.txt").read_text()  # a node whose port is down
    errors = [f for f in findings(one_rack(tmp_path / "b", lone)) if f[0] == "error"]
    assert ("fabric.txt", "kiln_slurm") in [e[1:3] for e in errors]
    assert any("shows no switch" in e[3] for e in errors)


def test_the_plugin_follows_what_topology_conf_holds():
    from kiln.render.context import cluster_context

    racks = require_valid(FABRIC / "inventory-3level")
    assert cluster_context(racks)["kiln"]["topology_plugin"] is True  # racks: leaves
    assert cluster_context(racks, fabric_switches=0)["kiln"]["topology_plugin"] is False
    assert cluster_context(racks, fabric_switches=3)["kiln"]["topology_plugin"] is True
