"""The catalogue of kiln_* inventory keys: type, scope, default and meaning.

This table is the single source for validation ("unknown key, did you mean ..."), the
defaults, and the key reference in README.md (tests check they agree).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kiln.inventory.batches import BATCH_SIZE
from kiln.inventory.containers_spec import CONTAINERS_KEY, REGISTRY_PASSWORD_KEY, ContainersSpec
from kiln.inventory.health_spec import HealthSpec
from kiln.inventory.ib_spec import IbSpec
from kiln.inventory.mirror_spec import MIRROR_KEY, MirrorSpec, image_references
from kiln.inventory.monitoring_spec import MONITORING_KEY, MonitoringSpec
from kiln.inventory.receptor_spec import ReceptorSpec
from kiln.inventory.slurm_spec import SlurmSpec

# Values that reach a shell command or a config file line: no spaces, quotes or
# metacharacters (; | & $ ` ( ) < > \ * ? and newlines).
SAFE_TOKEN = re.compile(r"^[A-Za-z0-9._:/@%+,=-]+$")
SLURM_TIME = re.compile(r"^(INFINITE|UNLIMITED|\d+|\d+:\d{2}(:\d{2})?|\d+-\d+(:\d{2}){0,2})$")


def ansible_plain(value: object) -> object:
    """A value as an Ansible filter receives it, in plain dicts and lists: Ansible hands filters
    lazy containers whose items pydantic reads unresolved (as _LazyValue, ansible-core 2.19);
    iterating them in Python resolves each item. What the models here validate in a filter."""
    if isinstance(value, Mapping):
        return {key: ansible_plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [ansible_plain(item) for item in value]
    return value


class StrictModel(BaseModel):
    # strict: "8" is not a number and "yes" is not a boolean; extra=forbid catches typos.
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class VersionsSpec(StrictModel):
    driver_branch: int | None = Field(None, description="NVIDIA driver branch, e.g. 570")
    cuda: str | None = Field(None, description="CUDA toolkit version, e.g. '12.8'")
    nccl: str | None = Field(None, description="NCCL version, e.g. '2.26.5'")
    slurm: str | None = Field(None, description="Slurm version, e.g. '24.11'")
    rocm: str | None = Field(
        None, description="ROCm release on AMD Instinct nodes, e.g. '6.2.4' (no default)"
    )


class PartitionSpec(StrictModel):
    name: str = Field(description="Slurm partition name")
    groups: list[str] = Field(default_factory=list, description="inventory groups it holds")
    nodes: list[str] = Field(default_factory=list, description="extra host names it holds")
    default: bool = Field(False, description="the partition jobs land in without -p")
    max_time: str = Field("INFINITE", description="Slurm MaxTime, e.g. 2-00:00:00")

    @field_validator("max_time")
    @classmethod
    def _slurm_time(cls, value: str) -> str:
        if not SLURM_TIME.match(value):
            raise ValueError("must be a Slurm time such as INFINITE, 60, 12:00:00 or 2-00:00:00")
        return value


class ClockSpec(StrictModel):
    min_mhz: int = Field(gt=0)
    max_mhz: int = Field(gt=0)


class PowerSpec(StrictModel):
    persistence_mode: bool = Field(True, description="nvidia-smi -pm 1 on every GPU")
    power_limit_w: int | None = Field(None, description="per-GPU limit; profile default if unset")
    gpu_clocks: ClockSpec | None = Field(
        None, description="locked graphics clocks (nvidia-smi -lgc)"
    )
    memory_clocks: ClockSpec | None = Field(None, description="locked memory clocks (-lmc)")
    fan_profile: Literal["standard", "optimal", "full", "heavy-io"] | None = Field(
        None, description="BMC fan profile, set through the vendor adapter"
    )


class BurninSpec(StrictModel):
    suite: Literal["quick", "standard", "soak"] = Field("quick", description="default suite")
    soak_hours: float = Field(4.0, gt=0, description="duration of the soak suite")
    gemm_tflops_floor: float | None = Field(None, gt=0, description="override the profile floor")
    allreduce_busbw_floor_gbs: float | None = Field(
        None, gt=0, description="override the profile's intra-node all-reduce floor"
    )
    allreduce_fabric_efficiency: float | None = Field(
        None,
        gt=0,
        le=1,
        description="share of rails x line rate / 8 a ring across nodes must reach; default 0.75",
    )
    gemm_relative_pct: float = Field(
        10.0, gt=0, lt=100, description="fail a GPU this % below its node's best"
    )
    node_relative_pct: float = Field(
        10.0, gt=0, lt=100, description="fail a node this % below the fleet median"
    )
    time_limit_minutes: int = Field(30, gt=0, description="Slurm time limit of each job")
    ib_write_bw_floor_pct: float | None = Field(
        None,
        gt=0,
        le=100,
        description="share of a rail's line rate ib_write_bw must reach; default 90 % "
        "(85 % below 100 Gb/s)",
    )
    container: str | None = Field(
        None,
        description="run the GEMM and the all-reduces inside this image, the path users' jobs "
        "take (one of kiln_containers.images; docs/containers.md)",
    )

    @field_validator("container")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return value if value is None else image_references([value])[0]


class RolloutSpec(StrictModel):
    batch_size: int | str = Field("100%", description="hosts per rolling batch: a count or N%")
    max_fail_percentage: int = Field(
        0, ge=0, le=100, description="failed hosts tolerated per batch, in %"
    )
    shard_by: Literal["rack_group", "rack", "count"] = Field(
        "rack_group",
        description="how to split the fleet: whole racks packed up to shard_size nodes, one "
        "shard per rack, or shard_size nodes in inventory order",
    )
    shard_size: int = Field(
        512, gt=0, description="nodes per shard (rack_group: at most, never splitting a rack)"
    )
    max_parallel_shards: int = Field(
        0,
        ge=0,
        description="shards run at once; 0: as many as fit controller_memory_gib, at most one "
        "per CPU core of this controller",
    )
    controller_memory_gib: float = Field(
        2.0,
        gt=0,
        description="memory the running shards may take on this controller (estimated per "
        "shard from its forks) when max_parallel_shards is 0",
    )
    worker_runner: str = Field(
        "ansible-runner", description="the ansible-runner command on kiln_workers hosts"
    )
    worker_transport: Literal["ssh", "receptor"] = Field(
        "ssh",
        description="how kiln reaches kiln_workers hosts: ssh to each, or work units through "
        "a Receptor mesh (kiln_rollout.receptor; docs/scale.md)",
    )
    receptor: ReceptorSpec | None = Field(
        None, description="the Receptor mesh's control service (worker_transport: receptor)"
    )
    # Memory per running shard grows with its forks (docs/scale.md: about 85 MiB + 12-14 MiB a
    # busy fork on 512-host shards): fewer forks let more shards run within the same memory.
    forks: int = Field(25, ge=1, le=500, description="Ansible forks per shard process")

    @model_validator(mode="after")
    def _transport(self) -> RolloutSpec:
        if self.worker_transport == "receptor" and self.receptor is None:
            raise ValueError("worker_transport receptor needs kiln_rollout.receptor (its socket)")
        return self

    @field_validator("batch_size")
    @classmethod
    def _batch_size(cls, value: int | str) -> int | str:
        if isinstance(value, int):
            if value < 1:
                raise ValueError("must be at least 1")
            return value
        if not BATCH_SIZE.match(value):
            raise ValueError("must be a count such as 8 or a percentage such as 25%")
        return value


class StateSpec(StrictModel):
    backend: Literal["auto", "controller", "local"] = Field(
        "auto",
        description="where the provision lock and the cluster's state live: the controller, "
        "the local state dir, or auto (the controller; local only before the cluster is up)",
    )
    path: str = Field(
        "/var/lib/kiln/state",
        pattern=r"^/[A-Za-z0-9._/-]+$",
        description="the state directory on the controller (an absolute path)",
    )


@dataclass(frozen=True, slots=True)
class KeySpec:
    name: str
    scope: Literal["host", "cluster"]
    kind: str  # "str", "int", "bool", "list[str]", "secret", or a model name
    description: str
    default: str  # as documented
    model: type[BaseModel] | None = None
    reaches_command: bool = False


KEYS: dict[str, KeySpec] = {
    spec.name: spec
    for spec in (
        KeySpec(
            "kiln_gpu_model",
            "host",
            "str",
            "hardware profile id (a100-sxm-40g, a100-sxm-80g, h100-sxm, h100-pcie, h100-nvl, "
            "h200-sxm, h200-nvl, b200, l40s) or none for CPU-only nodes",
            "none on controllers; required on compute nodes",
            reaches_command=True,
        ),
        KeySpec("kiln_gpu_count", "host", "int", "GPUs in the node", "the profile's default count"),
        KeySpec(
            "kiln_os",
            "host",
            "str",
            "OS release: debian-12, debian-13, ubuntu-22.04, ubuntu-24.04, rhel-9 (docs/gpu.md)",
            "debian-12",
        ),
        KeySpec("kiln_arch", "host", "str", "CPU architecture: x86_64 or aarch64", "x86_64"),
        KeySpec(
            "kiln_rack",
            "host",
            "str",
            "rack the node sits in; drives topology.conf",
            "unracked",
            reaches_command=True,
        ),
        KeySpec(
            "kiln_leaf_switch",
            "host",
            "str",
            "InfiniBand leaf switch the node hangs off",
            "leaf-<rack>",
            reaches_command=True,
        ),
        KeySpec(
            "kiln_nvlink_domain",
            "host",
            "str",
            "the multi-node NVLink domain the node is in (an NVL72 rack: nvidia-smi -q's "
            "ClusterUUID.CliqueId, or the rack's name); kiln_slurm.topology block makes a Slurm "
            "block of each (docs/fabric.md)",
            "none",
            reaches_command=True,
        ),
        KeySpec(
            "kiln_ib_hcas",
            "host",
            "list[str]",
            "InfiniBand HCAs, one per rail, in rail order: a name (mlx5_0), node GUID "
            "(0x946dae0300cde72c) or PCI address (0000:1a:00.0)",
            "[] (no fabric)",
            reaches_command=True,
        ),
        KeySpec(
            "kiln_ib_ipoib_addresses",
            "host",
            "list[str]",
            "IPoIB address/prefix per rail, overriding the ones derived from kiln_ib.ipoib",
            "derived: the rail network plus the host part of the management address",
            reaches_command=True,
        ),
        KeySpec(
            "kiln_bmc_address", "host", "str", "BMC (IPMI) address", "none", reaches_command=True
        ),
        KeySpec("kiln_bmc_user", "host", "str", "BMC user name", "none", reaches_command=True),
        KeySpec("kiln_bmc_password", "host", "secret", "BMC password (ansible-vault only)", "none"),
        KeySpec("kiln_sockets", "host", "int", "CPU sockets", "the profile's node shape"),
        KeySpec(
            "kiln_cores_per_socket", "host", "int", "cores per socket", "the profile's node shape"
        ),
        KeySpec(
            "kiln_threads_per_core",
            "host",
            "int",
            "hardware threads per core",
            "the profile's node shape",
        ),
        KeySpec(
            "kiln_real_memory_mb",
            "host",
            "int",
            "memory Slurm may hand out, in MB",
            "the profile's node shape",
        ),
        KeySpec(
            "kiln_power",
            "host",
            "PowerSpec",
            "power and cooling policy; set per group for different limits",
            "persistence on, profile default limit",
            model=PowerSpec,
        ),
        KeySpec(
            "kiln_cluster_name", "cluster", "str", "Slurm ClusterName", "kiln", reaches_command=True
        ),
        KeySpec(
            "kiln_versions",
            "cluster",
            "VersionsSpec",
            "driver branch, CUDA, NCCL and Slurm versions",
            "the newest combination the compatibility table marks tested",
            model=VersionsSpec,
        ),
        KeySpec(
            "kiln_partitions",
            "cluster",
            "list[PartitionSpec]",
            "Slurm partitions",
            "one default partition `batch` holding every compute node",
            model=PartitionSpec,
        ),
        KeySpec(
            "kiln_burnin",
            "cluster",
            "BurninSpec",
            "burn-in suite and thresholds",
            "quick suite, the profile's floors",
            model=BurninSpec,
        ),
        KeySpec(
            "kiln_rollout",
            "cluster",
            "RolloutSpec",
            "rolling batches and shards",
            "all hosts in one batch, no failures tolerated",
            model=RolloutSpec,
        ),
        KeySpec(
            "kiln_slurm",
            "cluster",
            "SlurmSpec",
            "Slurm options",
            "accounting off, cgroups on, new nodes quarantined, topology.conf from racks",
            model=SlurmSpec,
        ),
        KeySpec(
            "kiln_ib",
            "cluster",
            "IbSpec",
            "InfiniBand fabric: subnet manager, link rate, IPoIB networks per rail",
            "external subnet manager, NDR 400 links, no IPoIB",
            model=IbSpec,
        ),
        KeySpec(
            "kiln_state",
            "cluster",
            "StateSpec",
            "where the provision lock and the cluster's state live (docs/gitops.md)",
            "auto: on the controller; local only before bring-up, else exit 3",
            model=StateSpec,
        ),
        KeySpec(
            "kiln_health",
            "cluster",
            "HealthSpec",
            "the node health check Slurm runs (docs/health.md)",
            "off; interval 300 s, no auto-resume",
            model=HealthSpec,
        ),
        KeySpec(*MONITORING_KEY, model=MonitoringSpec),
        KeySpec(*MIRROR_KEY, model=MirrorSpec),
        KeySpec(*CONTAINERS_KEY, model=ContainersSpec),
        KeySpec(*REGISTRY_PASSWORD_KEY),
        KeySpec(
            "kiln_munge_key",
            "cluster",
            "secret",
            "munge key (ansible-vault only); generated on the controller if unset",
            "generated",
        ),
    )
}

# Secrets Ansible itself reads; plaintext values in an inventory are refused too.
ANSIBLE_SECRETS = (
    "ansible_password",
    "ansible_ssh_pass",
    "ansible_become_password",
    "ansible_become_pass",
)
