"""The typed Cluster model that every later stage works from."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, InstanceOf

from kiln.inventory.containers_spec import ContainersSpec
from kiln.inventory.health_spec import HealthSpec
from kiln.inventory.mirror_spec import MirrorSpec
from kiln.inventory.monitoring_spec import MonitoringSpec
from kiln.inventory.schema import (
    BurninSpec,
    IbSpec,
    PowerSpec,
    RolloutSpec,
    SlurmSpec,
    StateSpec,
)
from kiln.parsers.ibnetdiscover import IbFabric
from kiln.profiles import HardwareProfile, Versions, get_profile
from kiln.profiles.slurm import DEFAULT_PLATFORM


class Node(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    address: str
    groups: tuple[str, ...]
    is_controller: bool
    is_compute: bool
    rack: str
    leaf_switch: str
    nvlink_domain: str | None = None  # kiln_nvlink_domain: a multi-node NVLink domain (NVL72)
    gpu_model: str
    gpu_count: int
    ib_hcas: tuple[str, ...] = ()
    bmc_address: str | None = None
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    real_memory_mb: int
    power: PowerSpec = Field(default_factory=PowerSpec)
    # The written variables, whatever their type: a dict built for this node (kiln.inventory.build)
    # is kept as it is; validating it as `dict` would copy it (a fifth of building a node).
    hostvars: InstanceOf[dict] = Field(default_factory=dict, repr=False)

    @property
    def profile(self) -> HardwareProfile:
        return get_profile(self.gpu_model)

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @property
    def has_gpus(self) -> bool:
        return self.gpu_model != "none" and self.gpu_count > 0

    @property
    def platform(self) -> str:
        """The OS release the node runs (kiln_os), debian-12 where the inventory says none."""
        return str(self.hostvars.get("kiln_os") or DEFAULT_PLATFORM)


class Partition(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    nodes: tuple[str, ...]
    default: bool = False
    max_time: str = "INFINITE"


class Cluster(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    inventory_dir: Path
    nodes: tuple[Node, ...]
    groups: dict[str, tuple[str, ...]]  # group -> host names, children included
    versions: Versions
    partitions: tuple[Partition, ...]
    burnin: BurninSpec = Field(default_factory=BurninSpec)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    slurm: SlurmSpec = Field(default_factory=SlurmSpec)
    ib: IbSpec = Field(default_factory=IbSpec)
    state: StateSpec = Field(default_factory=StateSpec)
    health: HealthSpec = Field(default_factory=HealthSpec)
    monitoring: MonitoringSpec = Field(default_factory=MonitoringSpec)
    mirror: MirrorSpec = Field(default_factory=MirrorSpec)
    containers: ContainersSpec = Field(default_factory=ContainersSpec)
    # The stored capture of kiln_slurm.topology: fabric, parsed once while validating;
    # topology.conf is rendered from it (kiln.fabric.topology.topology_from_capture).
    fabric: InstanceOf[IbFabric] | None = Field(default=None, repr=False, exclude=True)

    @cached_property
    def _by_name(self) -> dict[str, Node]:
        return {node.name: node for node in self.nodes}

    def node(self, name: str) -> Node:
        return self._by_name[name]

    def declared_slurm(self, node: Node) -> str | None:
        """kiln_versions.slurm where the inventory writes it for `node`; None where it does not
        (the node gets what its platform ships)."""
        written = (node.hostvars.get("kiln_versions") or {}).get("slurm")
        return self.versions.slurm if written else None

    # The model is frozen, so the selections below are computed once (`kiln plan` asks for the
    # controllers once per shard); each call still returns a list of its own.
    @cached_property
    def _controllers(self) -> tuple[Node, ...]:
        return tuple(node for node in self.nodes if node.is_controller)

    @cached_property
    def _compute(self) -> tuple[Node, ...]:
        return tuple(node for node in self.nodes if node.is_compute)

    @property
    def controllers(self) -> list[Node]:
        return list(self._controllers)

    @property
    def compute(self) -> list[Node]:
        return list(self._compute)

    @cached_property
    def gpu_total(self) -> int:
        return sum(node.gpu_count for node in self._compute)
