"""Test doubles of InfiniBand for the burn-in tests: a /sys/class/infiniband tree read with the
very command burn-in runs on the nodes, and a small inventory of nodes that declare HCAs.
(A double of a hardware tool lives in tests/ only, never in the product.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

from captures import shared_capture
from kiln.fabric.links import sysfs_dump_command

FIXTURES = Path(__file__).parent / "fixtures"
HDR_195 = shared_capture(
    "ib_write_bw/loopback_all_sizes_MBps_server_client_interleaved_superbench.txt"
)
ROCE_98 = shared_capture("ib_write_bw/roce_100g_server_report_gbits_duration5_hpe_shs_docs.txt")
GEMM = FIXTURES / "burnin" / "gpu8" / "run" / "gemm" / "gpu001.json"  # a healthy H100 node

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
GUIDS = {"mlx5_0": "946d:ae03:00cd:e72c", "mlx5_1": "946d:ae03:00cd:e884"}
PCI = {"mlx5_0": "0000:1a:00.0", "mlx5_1": "0000:3c:00.0"}


def inventory(root: Path, nodes=NODES, hcas="[mlx5_0, mlx5_1]", rate=200) -> Path:
    hosts = "".join(
        f"        {n}:\n          ansible_host: 10.0.1.{i + 1}\n" for i, n in enumerate(nodes)
    )
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(
        "---\nall:\n  children:\n    kiln_controllers:\n      hosts:\n        ctl01:\n"
        "          ansible_host: 10.0.0.2\n    kiln_compute:\n      vars:\n"
        f"        kiln_gpu_model: h100-sxm\n        kiln_ib_hcas: {hcas}\n      hosts:\n" + hosts
    )
    (root / "group_vars" / "all.yml").write_text(
        f"---\nkiln_cluster_name: ibtest\nansible_user: root\nkiln_ib:\n  link_rate_gbps: {rate}\n"
    )
    return root


def sysfs_tree(root: Path, ports: dict[str, dict]) -> Path:
    """A /sys/class/infiniband double: per HCA its GUID, PCI device link, port 1 and counters."""
    tree = root / "class" / "infiniband"
    for hca, port in ports.items():
        device = root / "devices" / "pci0000:00" / PCI[hca]
        device.mkdir(parents=True)
        base = tree / hca
        (base / "ports" / "1" / "counters").mkdir(parents=True)
        (base / "ports" / "1" / "gids").mkdir()
        (base / "device").symlink_to(device)
        (base / "node_guid").write_text(GUIDS[hca] + "\n")
        attrs = {
            "state": "4: ACTIVE",
            "phys_state": "5: LinkUp",
            "rate": "200 Gb/sec (4X HDR)",
            "link_layer": "InfiniBand",
        }
        attrs.update(port.get("attrs", {}))
        for name, value in attrs.items():
            (base / "ports" / "1" / name).write_text(value + "\n")
        (base / "ports" / "1" / "gids" / "0").write_text("fe80:0000:0000:0000:" + GUIDS[hca] + "\n")
        counters = {"symbol_error": 0, "link_downed": 0, "port_xmit_data": 8}
        counters.update(port.get("counters", {}))
        for name, value in counters.items():
            (base / "ports" / "1" / "counters" / name).write_text(f"{value}\n")
    return tree


def dump(root: Path, ports: dict[str, dict]) -> str:
    """What burn-in reads from a node: its command, run against the double."""
    tree = sysfs_tree(root, ports)
    return subprocess.run(
        ["sh", "-c", sysfs_dump_command(str(tree))],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


HEALTHY = {"mlx5_0": {}, "mlx5_1": {}}
