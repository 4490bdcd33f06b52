"""Rules about the cluster as a whole: unique addresses, both kiln groups, its name, versions."""

from __future__ import annotations

import re
from collections import defaultdict

from kiln.inventory.context import COMPUTE, CONTROLLERS, InventoryContext
from kiln.inventory.findings import FindingCollector, Origin
from kiln.profiles import HardwareProfile, load_compat

CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


def host_addresses_are_unique(ctx: InventoryContext, out: FindingCollector) -> None:
    # Over every host, not only valid ones: a host with another mistake (an unknown GPU
    # model, say) still must not share its address.
    for address, names in ctx.hosts_by_address.items():
        if len(names) > 1:
            out.error(
                f"hosts {', '.join(names)} share the address {address}",
                origin=ctx.origin_of(ctx.hosts[names[1]], "ansible_host")
                or ctx.declared_at(names[1]),
                key="ansible_host",
                hint="every host needs its own ansible_host",
            )


def bmc_addresses_are_unique(ctx: InventoryContext, out: FindingCollector) -> None:
    """Every node has its own BMC, on the management network: no host's address either."""
    by_address = ctx.hosts_by_address
    by_bmc: dict[str, list[str]] = defaultdict(list)
    for name, host in ctx.hosts.items():
        bmc = ctx.value(host, "kiln_bmc_address")
        if bmc:
            by_bmc[bmc].append(name)
    for address, names in by_bmc.items():
        if len(names) > 1:
            out.error(
                f"hosts {', '.join(names)} share the BMC address {address}",
                origin=ctx.origin_of(ctx.hosts[names[1]], "kiln_bmc_address"),
                key="kiln_bmc_address",
                hint="every node has its own BMC",
            )
        if address in by_address:
            out.error(
                f"BMC address {address} of {names[0]} is also the address of "
                f"{by_address[address][0]}",
                origin=ctx.origin_of(ctx.hosts[names[0]], "kiln_bmc_address"),
                key="kiln_bmc_address",
                hint="the BMC sits on the management network",
            )


def has_a_controller(ctx: InventoryContext, out: FindingCollector) -> None:
    if not ctx.membership.get(CONTROLLERS):
        out.error(
            f"no controller: group {CONTROLLERS} has no hosts",
            origin=_hosts_file(ctx),
            key=CONTROLLERS,
            hint=f"add the Slurm controller host to {CONTROLLERS}",
        )


def has_compute_nodes(ctx: InventoryContext, out: FindingCollector) -> None:
    if not ctx.membership.get(COMPUTE):
        out.error(
            f"no compute nodes: group {COMPUTE} has no hosts",
            origin=_hosts_file(ctx),
            key=COMPUTE,
            hint=f"list the GPU servers under {COMPUTE} (children groups per rack are fine)",
        )


def cluster_name_is_valid(ctx: InventoryContext, out: FindingCollector) -> None:
    """kiln_cluster_name becomes Slurm's ClusterName (and a database name with accounting)."""
    name, origin = ctx.cluster_value("kiln_cluster_name", "kiln")
    if name is not None and not CLUSTER_NAME.match(name):
        out.error(
            f"kiln_cluster_name {name!r} is not a valid Slurm ClusterName",
            origin=origin,
            key="kiln_cluster_name",
            hint="lowercase letters, digits, '-' and '_', at most 40, starting with a letter",
        )


def versions_are_compatible(ctx: InventoryContext, out: FindingCollector) -> None:
    """The driver, CUDA, NCCL and Slurm versions against the compatibility table, for the GPU
    models the nodes carry."""
    if ctx.versions is None:
        return
    for problem in load_compat().check(ctx.versions, _gpu_profiles_in_use(ctx)):
        where = ctx.written_at("kiln_versions", *([problem.key] if problem.key else []))
        out.add(
            problem.level,
            problem.message,
            origin=where,
            key=f"kiln_versions.{problem.key}",
            hint=problem.hint,
        )


def _gpu_profiles_in_use(ctx: InventoryContext) -> list[HardwareProfile]:
    in_use: dict[str, HardwareProfile] = {}
    for host in ctx.hosts.values():
        profile = ctx.profile(host)
        if profile is not None and profile.id not in in_use and ctx.gpu_count(host) > 0:
            in_use[profile.id] = profile
    return list(in_use.values())


def _hosts_file(ctx: InventoryContext) -> Origin | None:
    return Origin(ctx.raw.sources[0]) if ctx.raw.sources else None
