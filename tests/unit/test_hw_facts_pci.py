"""Preflight's GPU count from /sys/bus/pci/devices (the kiln_hw_facts module): NVIDIA's GPUs on
NVIDIA nodes, AMD Instinct's on AMD nodes, never a bridge, an NVSwitch or an audio function.

The tree is built in a temporary folder the way sysfs shows it (a folder per PCI address with
`vendor`, `device` and `class` files). The classes are those `lspci -nn` prints for these parts
in public threads found with the search tool: an MI300X "Processing accelerators [1200]:
... [Instinct MI300X] [1002:74a1]", an MI325X "[1200] ... [1002:74a5]", an AMD audio function
"Audio device [0403] ... [1002:1640]"; the MI250X's display controller class (0380) and the
NVIDIA ids are PCI's published ids for those parts.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

MODULE = Path(__file__).parents[2] / "playbooks/roles/preflight/library/kiln_hw_facts.py"
spec = importlib.util.spec_from_file_location("kiln_hw_facts", MODULE)
hw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hw)

DEVICES = {  # address: (vendor, device, class)
    "0000:05:00.0": ("0x1002", "0x74a1", "0x120000"),  # MI300X
    "0000:15:00.0": ("0x1002", "0x74a5", "0x120000"),  # MI325X
    "0000:25:00.0": ("0x1002", "0x740c", "0x038000"),  # MI250X GCD
    "0000:25:00.1": ("0x1002", "0x1640", "0x040300"),  # an AMD audio function
    "0000:18:00.0": ("0x10de", "0x2330", "0x030200"),  # H100 SXM5
    "0000:07:00.0": ("0x10de", "0x22a3", "0x068000"),  # NVSwitch
    "0000:02:00.0": ("0x1a03", "0x2000", "0x030000"),  # ASPEED BMC VGA
}


def sysfs(root: Path) -> Path:
    for address, (vendor, device, cls) in DEVICES.items():
        folder = root / address
        folder.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("device", device), ("class", cls)):
            (folder / name).write_text(value + "\n")
    return root


def test_amd_nodes_count_instinct_gpus_and_nothing_else(tmp_path):
    found = hw.gpu_pci(str(sysfs(tmp_path)), vendor="amd")
    assert [d["address"] for d in found] == ["0000:05:00.0", "0000:15:00.0", "0000:25:00.0"]


def test_nvidia_nodes_count_as_before(tmp_path):
    found = hw.gpu_pci(str(sysfs(tmp_path)))
    assert found == [{"address": "0000:18:00.0", "device": "0x2330"}]
