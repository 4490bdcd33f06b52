"""A node's hardware identity (issue 33): a replaced board, GPU or HCA under the same node name
sends the node back to quarantine, burned in again before it runs jobs. The reader the
slurm_node role installs (run here against a stand-in sysfs and a stand-in nvidia-smi replaying
real `nvidia-smi -q -x` captures), the comparison both the role and the drift probe use, and the
drift probe running the reader so a converged re-apply cannot skip the slurm stage on such a
node. On the sandbox: tests/integration/test_quarantine.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from captures import shared_capture
from kiln.drift import assess, node
from kiln.drift.remote import NODE_SCRIPT, NodeProbe
from kiln.parsers.identity import NEW_NODE, identity_change, identity_only

ROOT = Path(__file__).resolve().parents[2]
READER = ROOT / "playbooks" / "roles" / "slurm_node" / "files" / "kiln-node-identity"
B200 = "nvidia-smi-q-x/b200_8gpu_fabric_completed_clique0_k8stestinfra.xml"
GB200 = "nvidia-smi-q-x/gb200_4gpu_p6e_arm64_fabric_completed_clique2_k8stestinfra.xml"
SHAPE = "cpus=224 memory_gib=2015 gpus=8 model=b200"


# --- the comparison -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seen", "now", "change"),
    [
        ("", f"{SHAPE} board=A/B gpu_serials=1,2 hca_guids=", NEW_NODE),
        (None, f"{SHAPE} board=A/B", NEW_NODE),
        (f"{SHAPE} board=A/B gpu_serials=1,2", f"{SHAPE} board=A/B gpu_serials=1,2", ""),
        # a line an older kiln wrote, without the identity: taken as it is (no mass quarantine)
        (SHAPE, f"{SHAPE} board=A/B gpu_serials=1,2", ""),
        (f"{SHAPE} gpu_serials=1,2", f"{SHAPE} gpu_serials=1,9", "hardware changed: gpu_serials"),
        (
            f"{SHAPE} board=A/B hca_guids=m:1",
            f"{SHAPE} board=C/D hca_guids=m:2",
            "hardware changed: board, hca_guids",
        ),  # fmt: skip
        (
            "cpus=1 memory_gib=1 gpus=0 model=none",
            "cpus=2 memory_gib=1 gpus=0 model=none",
            "hardware changed: cpus",
        ),  # fmt: skip
    ],
)
def test_a_node_changed_when_a_word_both_lines_hold_differs(seen, now, change):
    assert identity_change(seen, now) == change


# --- the reader -------------------------------------------------------------------------------


def stand_in_nvidia_smi(bin_dir: Path, capture: Path | None, rc: int = 0) -> None:
    """nvidia-smi replaying a real `nvidia-smi -q -x` capture (None: it prints nothing)."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    body = f"cat {capture}\n" if capture else ""
    script.write_text(f"#!/bin/sh\n{body}exit {rc}\n")
    script.chmod(0o755)


def sysfs(root: Path, product: str, board: str, hcas: dict[str, str]) -> Path:
    dmi = root / "sys" / "class" / "dmi" / "id"
    dmi.mkdir(parents=True)
    (dmi / "product_serial").write_text(product + "\n")
    (dmi / "board_serial").write_text(board + "\n")
    for name, guid in hcas.items():
        device = root / "sys" / "class" / "infiniband" / name
        device.mkdir(parents=True)
        (device / "node_guid").write_text(guid + "\n")
    return root


def read_identity(root: Path, bin_dir: Path) -> str:
    proc = subprocess.run(
        [sys.executable, str(READER), "--root", str(root)], capture_output=True, text=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=True, timeout=60,
    )  # fmt: skip
    return proc.stdout.strip()


@pytest.mark.parametrize(("capture", "gpus"), [(B200, 8), (GB200, 4)])
def test_the_reader_names_the_board_every_gpu_and_every_hca(tmp_path, capture, gpus):
    real = shared_capture(capture)
    serials = re.findall(r"<serial>([^<]*)</serial>", real.read_text())
    assert len(serials) == gpus
    root = sysfs(tmp_path / "root", "S123 X", "B-9", {"mlx5_1": "b8ce:f603:00a1:0002",
                                                     "mlx5_0": "b8ce:f603:00a1:0001"})  # fmt: skip
    stand_in_nvidia_smi(tmp_path / "bin", real)
    line = read_identity(root, tmp_path / "bin")
    assert line == (
        f"board=S123_X/B-9 gpu_serials={','.join(serials)} "
        "hca_guids=mlx5_0:b8ce:f603:00a1:0001,mlx5_1:b8ce:f603:00a1:0002"
    )
    # the same GPUs in another order is another machine? No: the same line, index order
    assert read_identity(root, tmp_path / "bin") == line


def test_a_node_without_the_driver_and_one_whose_gpus_cannot_be_read(tmp_path):
    root = sysfs(tmp_path / "root", "", "", {})
    (tmp_path / "bin").mkdir()  # no nvidia-smi at all: a CPU node
    assert read_identity(root, tmp_path / "bin") == "board=-/- gpu_serials= hca_guids="
    stand_in_nvidia_smi(tmp_path / "bin", None, rc=15)  # a GPU off the bus: it fails
    assert "gpu_serials=unreadable" in read_identity(root, tmp_path / "bin")


# --- the drift probe: a converged re-apply runs the slurm stage on a changed node ------------


def test_the_probe_reads_where_the_role_writes():
    # node.py is shipped to nodes on its own and cannot import the role's variables
    role = yaml.safe_load((ROOT / "playbooks/roles/slurm_node/vars/main.yml").read_text())
    assert role["__slurm_node_joined_marker"] == node.JOINED
    assert role["__slurm_node_identity_reader"] == node.IDENTITY_READER


def probe_with_identity(tmp_path: Path, seen: str | None) -> dict:
    root = sysfs(tmp_path / "root", "S1", "B1", {})
    reader = root / "usr" / "local" / "libexec" / "kiln" / "node-identity"
    reader.parent.mkdir(parents=True)
    reader.write_text(f"#!{sys.executable}\n" + READER.read_text().split("\n", 1)[1])
    reader.chmod(0o755)
    if seen is not None:
        (root / "var" / "lib" / "kiln").mkdir(parents=True)
        (root / "var" / "lib" / "kiln" / "slurm-joined").write_text(seen + "\n")
    (tmp_path / "bin").mkdir()
    proc = subprocess.run(
        [sys.executable, str(NODE_SCRIPT), "--root", str(root), "probe"], capture_output=True,
        text=True, env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}, check=True, timeout=60,
    )  # fmt: skip
    return json.loads(proc.stdout)


def test_the_probe_reports_what_the_role_saw_and_what_the_node_is_now(tmp_path):
    seen = f"{SHAPE} board=S0/B1 gpu_serials= hca_guids="
    found = probe_with_identity(tmp_path, seen)
    assert found["joined"] == seen
    assert found["identity"] == "board=S1/B1 gpu_serials= hca_guids="
    shutil.rmtree(tmp_path / "root")
    shutil.rmtree(tmp_path / "bin")
    assert probe_with_identity(tmp_path, None)["joined"] is None


def test_a_changed_identity_runs_the_slurm_stage_there_and_nothing_else():
    desired = {stage: {"n1": "f", "n2": "f"} for stage in ("base", "slurm")}
    stages = {stage: {"fingerprint": "f", "drift": []} for stage in ("base", "slurm")}
    now = "board=S1/B1 gpu_serials=10,11 hca_guids="
    probes = {
        "n1": NodeProbe(
            "n1", True, stages, joined=f"{SHAPE} board=S1/B1 gpu_serials=10,99", identity=now
        ),  # fmt: skip
        "n2": NodeProbe("n2", True, stages, joined=f"{SHAPE} {now}", identity=now),
    }
    result = assess(desired, probes, ["base", "slurm"])
    slurm = result.decisions["slurm"]
    assert slurm["n1"].reason == "drifted" and slurm["n2"].reason == "unchanged"
    assert slurm["n1"].describe() == (
        "hardware changed: gpu_serials (was board=S1/B1 gpu_serials=10,99, now " + now + ")"
    )
    assert identity_only(f"{SHAPE} {now}") == now
    assert {n: d.reason for n, d in result.decisions["base"].items()} == {
        "n1": "unchanged", "n2": "unchanged",
    }  # fmt: skip
