"""`kiln inspect` diffing: declared hardware beside a node's probe and Slurm's view.

GPU data is the recorded `nvidia-smi -q -x` of tests/fixtures/real/nvidia-smi-q-x (one A100
SXM4 80GB shown, driver 535.54.03, power limit 500 W); Slurm's side is the recorded `scontrol
show node` of tests/fixtures/real/slurm-sinfo-scontrol. The probe's framing around them (PCI
lines, HCA names) is derived, as labelled at each use.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from captures import shared_capture
from kiln.fleet import CommandOutcome, ExecResult, NodeResult
from kiln.slurmctl.inspect import ABSENT, MARK, PROBE, inspect_node, parse_probe
from slurm_inventory import slurm_cluster

XML = shared_capture("nvidia-smi-q-x/a100_sxm4_80gb_mig_telegraf.xml").read_text()
SCONTROL = shared_capture(
    "slurm-sinfo-scontrol/scontrol_show_node_gpu_gres_drain_huji_slurm1711.txt"
)


def probe_output(smi: str | None, pci: list[str], ib: list[str], driver: str = "") -> str:
    return "\n".join([
        f"{MARK} nvidia-smi", smi if smi is not None else ABSENT,
        f"{MARK} pci", *pci, f"{MARK} ib", *ib, f"{MARK} driver", driver,
    ])  # fmt: skip


def scontrol_block(name: str) -> str:
    blocks = re.split(r"\n(?=NodeName=)", SCONTROL.read_text())
    return next(block for block in blocks if block.startswith(f"NodeName={name} "))


class Runner:
    def __init__(self, probe: str, node_status: CommandOutcome = CommandOutcome.OK) -> None:
        self.probe, self.node_status, self.commands = probe, node_status, []

    def __call__(self, nodes, command, *, fanout, timeout):
        (node,) = nodes
        self.commands.append((node.name, command))
        if node.name == "ctl":
            block = scontrol_block("cortex-01" if "cortex" in command else "oxygen-04")
            out = f"@@kiln-step 0\n{block}\n@@kiln-step-rc 0\n"
            result = NodeResult("ctl", "10.0.0.1", CommandOutcome.OK, 0, out)
        elif self.node_status is CommandOutcome.OK:
            result = NodeResult(node.name, node.address, CommandOutcome.OK, 0, self.probe)
        else:
            result = NodeResult(node.name, node.address, self.node_status, error="no route")
        return ExecResult(command, [result], 0.1, 1, 60)


@pytest.fixture
def cluster(tmp_path: Path):
    return slurm_cluster(tmp_path)


def rows(found) -> dict[str, tuple[str, str, bool | None]]:
    return {row.item: (row.declared, row.shown, row.match) for row in found.rows}


def test_probe_is_fixed_text_without_inventory_values():
    assert "nvidia-smi -q -x" in PROBE and "/sys/class/infiniband" in PROBE
    assert "0x10de" in PROBE and "{" not in PROBE.replace("${d##*/}", "")


def test_parse_probe_reads_real_nvidia_smi_xml():
    # derived framing: one PCI line and two HCAs around the recorded XML
    shown = parse_probe(probe_output(XML, ["0000:01:00.0"], ["mlx5_1", "mlx5_0"]))
    assert shown.smi_present and shown.smi is not None and shown.gpu_count == 1
    assert shown.hcas == ["mlx5_0", "mlx5_1"] and shown.driver == "535.54.03"


def test_gpu_node_differences_are_marked(cluster):
    # derived framing around the recorded XML: one HCA missing
    runner = Runner(probe_output(XML, ["0000:01:00.0"], ["mlx5_0"], "535.54.03"))
    found = inspect_node(cluster, cluster.node("cortex-01"), runner=runner)
    table = rows(found)
    assert table["GPUs"] == ("8 x NVIDIA A100 SXM4 80GB (HGX/DGX A100)",
                             "1 x NVIDIA A100-SXM4-80GB (nvidia-smi)", False)  # fmt: skip
    assert table["IB HCAs"] == ("mlx5_0, mlx5_1", "mlx5_0", False)
    assert table["driver"][1] == "535.54.03" and table["driver"][2] is False  # branch 580 declared
    assert table["power limit"] == ("400 W", "500 W", False)
    assert table["slurm state"][1] == "allocated"
    assert table["slurm GPUs (Gres)"] == ("8", "8", True)
    assert [row.item for row in found.differences] == ["GPUs", "driver", "power limit", "IB HCAs"]
    assert not found.ok and found.to_dict()["gpus"][0]["power_limit_w"] == 500.0
    assert runner.commands[1] == (
        "ctl", "echo '@@kiln-step 0'; scontrol show node cortex-01; echo \"@@kiln-step-rc $?\"",
    )  # fmt: skip


def test_cpu_node_says_no_gpu_tools_and_shows_slurm_state(cluster):
    # derived: what a CPU-only node's probe prints (no nvidia-smi, no NVIDIA PCI device, no HCA)
    runner = Runner(probe_output(None, [], []))
    found = inspect_node(cluster, cluster.node("oxygen-04"), runner=runner)
    table = rows(found)
    assert table["GPUs"][2] is True and "no GPU tools" in table["GPUs"][1]
    assert "driver" not in table and "power limit" not in table
    assert table["slurm state"][1] == "idle+drain"
    assert table["slurm reason"][1] == ("idle+drain by root at 2019-01-29T10:42:12: memory issues?")
    assert found.ok and found.to_dict()["gpu_tools"] is False


def test_nvidia_smi_that_fails_falls_back_to_the_pci_count(cluster):
    # derived: nvidia-smi installed but the driver not loaded; 8 NVIDIA devices on the bus
    smi = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    pci = [f"0000:{bus:02x}:00.0" for bus in range(8)]
    found = inspect_node(
        cluster, cluster.node("cortex-01"), runner=Runner(probe_output(smi, pci, []))
    )
    declared, shown, match = rows(found)["GPUs"]
    assert match is True and shown.startswith("8 on the PCI bus; nvidia-smi failed: NVIDIA-SMI")
    assert rows(found)["driver"] == ("branch 580", "not loaded", False)


def test_unreachable_node_is_not_ok_but_slurm_is_still_shown(cluster):
    found = inspect_node(cluster, cluster.node("oxygen-04"),
                         runner=Runner("", node_status=CommandOutcome.UNREACHABLE))  # fmt: skip
    assert not found.reachable and not found.ok and "no route" in found.error
    assert rows(found)["slurm state"][1] == "idle+drain"


def test_slurm_that_cannot_be_read_is_an_error_not_unknown_to_slurm(cluster):
    class Down(Runner):
        def __call__(self, nodes, command, *, fanout, timeout):
            if nodes[0].name != "ctl":
                return super().__call__(nodes, command, fanout=fanout, timeout=timeout)
            error = "slurm_load_node error: Unable to contact slurm controller (connect failure)"
            out = "@@kiln-step 0\n@@kiln-step-rc 1\n"
            answer = NodeResult("ctl", "10.0.0.1", CommandOutcome.OK, 0, out, error)
            return ExecResult(command, [answer], 0.1, 1, 60)

    found = inspect_node(
        cluster, cluster.node("oxygen-04"), runner=Down(probe_output(None, [], []))
    )
    declared, shown, match = rows(found)["slurm"]
    assert match is False and not found.ok
    assert "cannot read Slurm" in shown and "Unable to contact slurm controller" in shown
    assert "unknown to Slurm" not in shown
