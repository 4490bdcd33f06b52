"""The provisioning stages, in order: the one place that lists them.

Each stage is one playbook in PLAYBOOKS_DIR; `site.yml` imports them all in this order. A stage
whose playbook does not exist yet is not offered (later issues add them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kiln.errors import InvalidInputError
from kiln.paths import PLAYBOOKS_DIR


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    playbook: str
    summary: str
    # The inventory groups the stage's plays target; hosts outside them are not run on.
    groups: tuple[str, ...] = ("kiln_controllers", "kiln_compute")
    # An optional stage: the Cluster attribute whose `enabled` turns it on (kiln_<switch> in the
    # inventory); off, `kiln plan` and `kiln provision` leave it out. None: always on.
    switch: str | None = None
    # A vendor's GPU stack: on only when some compute node carries that vendor's GPUs.
    gpu_vendor: str | None = None

    def path(self, playbooks_dir: Path = PLAYBOOKS_DIR) -> Path:
        return (playbooks_dir / self.playbook).resolve()


STAGES: tuple[Stage, ...] = (
    Stage("preflight", "preflight.yml", "gathered facts against the declared hardware"),
    Stage("base", "base.yml", "hostnames, /etc/hosts, chrony, packages, memlock, package holds"),
    Stage(
        "nvidia",
        "nvidia.yml",
        "driver, fabric manager, persistenced, DCGM, CUDA",
        ("kiln_compute",),
    ),
    Stage(
        "rocm",
        "rocm.yml",
        "amdgpu driver and ROCm on AMD Instinct nodes",
        ("kiln_compute",),
        gpu_vendor="amd",
    ),
    Stage("infiniband", "infiniband.yml", "rdma stack, IPoIB, subnet manager, link checks"),
    Stage("nccl", "nccl.yml", "NCCL and nccl-tests", ("kiln_compute",)),
    Stage("slurm", "slurm.yml", "munge, slurmdbd when accounting is on, slurmctld, slurmd, GRES"),
    Stage(
        "containers",
        "containers.yml",
        "containers in jobs: crun, oci.conf and OCI bundles (oci), or enroot and pyxis (pyxis)",
        # oci runs on the compute nodes; pyxis on the controllers too (srun reads its options)
        switch="containers",
    ),
    Stage("power", "power.yml", "persistence mode, power limits, clocks", ("kiln_compute",)),
    Stage(
        "monitoring",
        "monitoring.yml",
        "node exporter, DCGM exporter on GPU nodes, Prometheus targets on the controllers",
        switch="monitoring",
    ),
)


# Not a stage of a full run: `kiln provision --new-nodes` runs it on the controllers and the
# nodes provisioned before, to push the re-rendered cluster-wide files (slurm.conf, ...).
REFRESH = Stage("refresh", "refresh.yml", "the cluster-wide Slurm files, pushed after scale-out")

# Not a stage of a full run either: `kiln burnin` runs it on the nodes it tests, to install the
# workloads and their runtime before submitting them.
BURNIN = Stage("burnin", "burnin.yml", "burn-in workloads and their torch runtime")


def available_stages(playbooks_dir: Path = PLAYBOOKS_DIR) -> list[Stage]:
    """The stages whose playbook exists, in order."""
    return [stage for stage in STAGES if stage.path(playbooks_dir).is_file()]


def select_stages(names: str | None, playbooks_dir: Path = PLAYBOOKS_DIR) -> list[Stage]:
    """Resolve `--stages a,b` to stages in canonical order; None means every available stage."""
    available = available_stages(playbooks_dir)
    if not names:
        return available
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    known = {stage.name: stage for stage in STAGES}
    offered = {stage.name for stage in available}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise InvalidInputError(
            f"unknown stage(s): {', '.join(unknown)}",
            hint=f"stages, in order: {', '.join(stage.name for stage in STAGES)}",
        )
    missing = [name for name in wanted if name not in offered]
    if missing:
        raise InvalidInputError(
            f"stage(s) not available yet (no playbook): {', '.join(missing)}",
            hint=f"available: {', '.join(sorted(offered, key=list(known).index))}",
        )
    return [stage for stage in available if stage.name in wanted]


def stage_hosts(stage: Stage, groups: dict[str, tuple[str, ...]], hosts: list[str]) -> list[str]:
    """`hosts` that the stage's plays target, in order."""
    wanted = {host for group in stage.groups for host in groups.get(group, ())}
    return [host for host in hosts if host in wanted]
