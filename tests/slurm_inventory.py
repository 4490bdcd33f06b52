"""The small inventory the slurmctl unit tests share: a controller and four compute nodes."""

from __future__ import annotations

from pathlib import Path

from kiln.inventory import require_valid
from kiln.inventory.model import Cluster

HOSTS = """\
all:
  children:
    kiln_controllers:
      hosts:
        ctl: {ansible_host: 10.0.0.1}
    kiln_compute:
      hosts:
        cortex-01:
          ansible_host: 10.0.0.11
          kiln_gpu_model: a100-sxm-80g
          kiln_gpu_count: 8
          kiln_ib_hcas: [mlx5_0, mlx5_1]
        oxygen-04: {ansible_host: 10.0.0.12, kiln_gpu_model: none}
        cricket: {ansible_host: 10.0.0.13, kiln_gpu_model: none}
        gpu-new: {ansible_host: 10.0.0.14, kiln_gpu_model: none}
"""


def slurm_cluster(directory: Path) -> Cluster:
    """The inventory written into `directory`, validated."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text(HOSTS)
    return require_valid(directory)
