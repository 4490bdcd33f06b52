"""Build the Cluster model from an inventory the rules found no error in.

Nothing here judges: kiln.inventory.values and kiln.inventory.rules have reported every
problem, so each value reads, each host has a profile and each partition's groups exist.
Defaults come from the schema (kiln.inventory.schema) and the host's hardware profile.
"""

from __future__ import annotations

from kiln.inventory.containers_spec import ContainersSpec
from kiln.inventory.context import COMPUTE, CONTROLLERS, InventoryContext
from kiln.inventory.health_spec import HealthSpec
from kiln.inventory.mirror_spec import MirrorSpec
from kiln.inventory.model import Cluster, Node, Partition
from kiln.inventory.monitoring_spec import MonitoringSpec
from kiln.inventory.resolve import ResolvedHost
from kiln.inventory.schema import (
    BurninSpec,
    IbSpec,
    PowerSpec,
    RolloutSpec,
    SlurmSpec,
    StateSpec,
)


def build_cluster(ctx: InventoryContext) -> Cluster:
    capture = ctx.capture
    return Cluster(
        name=ctx.cluster_value("kiln_cluster_name", "kiln")[0],
        inventory_dir=ctx.raw.root,
        nodes=tuple(build_node(ctx, host) for host in ctx.hosts.values()),
        groups={group: tuple(hosts) for group, hosts in ctx.membership.items()},
        versions=ctx.versions,
        partitions=tuple(build_partitions(ctx)),
        burnin=ctx.cluster_value("kiln_burnin", BurninSpec())[0],
        rollout=ctx.cluster_value("kiln_rollout", RolloutSpec())[0],
        slurm=ctx.cluster_value("kiln_slurm", SlurmSpec())[0],
        ib=ctx.cluster_value("kiln_ib", IbSpec())[0],
        state=ctx.cluster_value("kiln_state", StateSpec())[0],
        health=ctx.cluster_value("kiln_health", HealthSpec())[0],
        monitoring=ctx.cluster_value("kiln_monitoring", MonitoringSpec())[0],
        containers=ctx.cluster_value("kiln_containers", ContainersSpec())[0],
        mirror=ctx.cluster_value("kiln_mirror", MirrorSpec())[0],
        fabric=capture.fabric if capture else None,
    )


def build_node(ctx: InventoryContext, host: ResolvedHost) -> Node:
    profile = ctx.profile(host)
    shape = profile.node_shape
    rack = ctx.value(host, "kiln_rack", "unracked")
    return Node(
        name=host.name,
        address=ctx.address(host),
        groups=tuple(host.groups),
        is_controller=CONTROLLERS in host.groups,
        is_compute=COMPUTE in host.groups,
        rack=rack,
        leaf_switch=ctx.value(host, "kiln_leaf_switch", f"leaf-{rack}"),
        nvlink_domain=ctx.value(host, "kiln_nvlink_domain"),
        gpu_model=profile.id,
        gpu_count=ctx.value(host, "kiln_gpu_count", profile.gpu_count_default),
        ib_hcas=tuple(ctx.value(host, "kiln_ib_hcas", [])),
        bmc_address=ctx.value(host, "kiln_bmc_address"),
        power=ctx.value(host, "kiln_power", PowerSpec()),
        sockets=ctx.value(host, "kiln_sockets", shape.sockets),
        cores_per_socket=ctx.value(host, "kiln_cores_per_socket", shape.cores_per_socket),
        threads_per_core=ctx.value(host, "kiln_threads_per_core", shape.threads_per_core),
        real_memory_mb=ctx.value(host, "kiln_real_memory_mb", shape.real_memory_mb),
        hostvars={key: located.value for key, located in host.vars.items()},
    )


def build_partitions(ctx: InventoryContext) -> list[Partition]:
    """The written partitions; without kiln_partitions, one default `batch` of every
    compute node."""
    specs = ctx.partition_specs
    if specs is None:
        return [Partition(name="batch", nodes=tuple(ctx.membership.get(COMPUTE, [])), default=True)]
    return [
        Partition(
            name=spec.name,
            nodes=tuple(ctx.partition_members(spec)),
            default=spec.default,
            max_time=spec.max_time,
        )
        for spec in specs
    ]
