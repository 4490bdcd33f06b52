"""kiln_slurm.topology: fabric — the Slurm stage's topology.conf from a stored ibnetdiscover
capture instead of the racks, and how validation judges that capture (file:line findings)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

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
    assert "(fabric/ibnetdiscover.txt): 3 switch levels, leaves first." in conf
    # The racks would have put gpu008 under leaf-r03: the fabric has it with gpu005-gpu007.
    assert "SwitchName=P1-SU2-IBLEAF-R0 Nodes=gpu[005-008]" in conf
    assert "gpu017" not in conf  # not in the fabric: left out (validation warned)


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
    other = FABRIC.parent / "real" / "ibnetdiscover" / "dgx_h100_superpod_ndr_mqm9701_truncated.txt"
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
