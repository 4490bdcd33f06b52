"""Generate a realistic example inventory: one controller, N 8xH100 SXM nodes, 8 NDR rails.

Used for the committed inventories/example-h100 (N=128) and for the scale benchmark
(N=12,500, a 100,000-GPU site). Written line by line, not through yaml.dump, so 12,500 hosts
take well under a second and the output stays readable and yamllint-clean.
"""

from __future__ import annotations

from pathlib import Path

NODES_PER_RACK = 32
# The eight compute-fabric HCAs of a DGX H100 (the storage/in-band ports are left out).
DGX_H100_COMPUTE_HCAS = (
    "mlx5_0",
    "mlx5_3",
    "mlx5_4",
    "mlx5_5",
    "mlx5_6",
    "mlx5_9",
    "mlx5_10",
    "mlx5_11",
)

GROUP_VARS_ALL = """\
---
# Cluster-wide settings. Every kiln_* key is documented in README.md.
kiln_cluster_name: {name}
kiln_versions:
  driver_branch: 570
  cuda: "12.8"
  nccl: "2.25.1"
  slurm: "24.05.8"
# Debian 12 ships Slurm 22.05: 24.05 comes from the site's repository of SchedMD-built
# packages (slurm-smd-*), pinned and held at exactly kiln_versions.slurm (docs/slurm.md).
kiln_slurm:
  source: repository
  repository:
    url: https://packages.example.com/slurm/debian12
    key_url: https://packages.example.com/slurm/key.asc
kiln_partitions:
  - name: gpu
    groups: [kiln_compute]
    default: true
    max_time: 7-00:00:00
  - name: debug
    groups: [{first_rack}]
    max_time: "01:00:00"
kiln_burnin:
  suite: standard
kiln_rollout:
  batch_size: 25%
  max_fail_percentage: 5
  shard_by: rack_group
ansible_user: root
"""

GROUP_VARS_COMPUTE = """\
---
# Every compute node is an 8x H100 SXM server with eight NDR InfiniBand rails.
kiln_gpu_model: h100-sxm
kiln_gpu_count: 8
kiln_ib_hcas: [{hcas}]
kiln_power:
  persistence_mode: true
  power_limit_w: 700
"""


def _address(network: int, index: int) -> str:
    return f"10.{network}.{index // 250}.{index % 250 + 1}"


def example_inventory(nodes: int, name: str = "example") -> dict[str, str]:
    """The files of the example inventory, relative path -> content."""
    width = max(3, len(str(nodes)))
    racks = (nodes + NODES_PER_RACK - 1) // NODES_PER_RACK
    rack_width = max(2, len(str(racks)))
    lines = [
        "---",
        f"# {nodes} compute nodes ({nodes * 8} GPUs) in {racks} racks of up to "
        f"{NODES_PER_RACK}, one Slurm controller.",
        "all:",
        "  children:",
        "    kiln_controllers:",
        "      hosts:",
        "        slurm-ctl01: {ansible_host: 10.0.0.10, kiln_rack: r00}",
        "    kiln_compute:",
        "      children:",
    ]
    for rack in range(racks):
        rack_name = f"r{rack + 1:0{rack_width}d}"
        lines += [
            f"        rack_{rack_name}:",
            "          vars:",
            f"            kiln_rack: {rack_name}",
            "          hosts:",
        ]
        for index in range(rack * NODES_PER_RACK, min(nodes, (rack + 1) * NODES_PER_RACK)):
            lines.append(
                f"            gpu{index + 1:0{width}d}: {{ansible_host: {_address(1, index)}, "
                f"kiln_bmc_address: {_address(2, index)}}}"
            )
    first_rack = f"rack_r{1:0{rack_width}d}"
    return {
        "hosts.yml": "\n".join(lines) + "\n",
        "group_vars/all.yml": GROUP_VARS_ALL.format(name=name, first_rack=first_rack),
        "group_vars/kiln_compute.yml": GROUP_VARS_COMPUTE.format(
            hcas=", ".join(DGX_H100_COMPUTE_HCAS)
        ),
    }


def write_example(directory: Path, nodes: int, name: str = "example") -> list[Path]:
    written = []
    for relative, content in example_inventory(nodes, name).items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(path)
    return written
