"""Every inventory rule, in the order it runs: a reader sees here all that validation checks.

A rule is a small function over the InventoryContext that adds findings (level, file:line,
key, hint) to a FindingCollector and returns nothing; it never stops the others, so one run
reports every problem. Host rules run once per host and partition rules once per written
partition, all of a host's (a partition's) rules together, so the findings of one place keep
their order. Values that do not read as their type were reported by kiln.inventory.values
and read as None here: rules skip them rather than report them twice.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.inventory.context import InventoryContext
from kiln.inventory.findings import FindingCollector
from kiln.inventory.resolve import ResolvedHost
from kiln.inventory.rules import (
    blocks,
    cluster,
    connection,
    containers,
    fabric,
    hosts,
    mirror,
    partitions,
    platform,
    slurm,
)
from kiln.inventory.rules.partitions import WrittenPartition

Rule = Callable[[InventoryContext, FindingCollector], None]
HostRule = Callable[[InventoryContext, ResolvedHost, FindingCollector], None]
PartitionRule = Callable[[InventoryContext, WrittenPartition, FindingCollector], None]


class EachHost:
    """Host rules, all of them for one host before the next host."""

    def __init__(self, *rules: HostRule) -> None:
        self.rules = rules

    def __call__(self, ctx: InventoryContext, out: FindingCollector) -> None:
        for host in ctx.hosts.values():
            for rule in self.rules:
                rule(ctx, host, out)


class EachPartition:
    """Partition rules, all of them for one written partition before the next."""

    def __init__(self, *rules: PartitionRule) -> None:
        self.rules = rules

    def __call__(self, ctx: InventoryContext, out: FindingCollector) -> None:
        for index, spec in enumerate(ctx.partition_specs or []):
            partition = WrittenPartition(index, spec, ctx.written_at("kiln_partitions", index))
            for rule in self.rules:
                rule(ctx, partition, out)


RULES: tuple[Rule, ...] = (
    EachHost(
        hosts.name_is_a_label,
        hosts.one_address_per_host,
        hosts.address_is_ip_or_dns,
        hosts.in_a_kiln_group,
        hosts.gpu_model_is_known,
        hosts.gpu_count_in_profile_range,
        hosts.power_limit_in_profile_range,
        hosts.hcas_listed_once,
        hosts.node_shape_is_positive,
        platform.os_is_supported,
    ),
    cluster.host_addresses_are_unique,
    cluster.bmc_addresses_are_unique,
    cluster.has_a_controller,
    cluster.has_compute_nodes,
    cluster.cluster_name_is_valid,
    cluster.versions_are_compatible,
    slurm.slurm_comes_from_its_source,
    slurm.slurm_conf_fits_the_release,
    slurm.slurm_upgrade_is_within_the_window,
    mirror.sources_are_in_the_mirror,
    connection.commands_run_on_the_controller,
    EachPartition(
        partitions.name_is_safe,
        partitions.defined_once,
        partitions.groups_have_hosts,
        partitions.hosts_exist,
        partitions.holds_something,
        partitions.holds_compute_nodes_only,
    ),
    partitions.one_default,
    fabric.opensm_hosts_declare_hcas,
    fabric.capture_is_ibnetdiscover_output,
    fabric.capture_is_hidden_from_ansible,
    fabric.capture_holds_the_compute_nodes,
    blocks.nvlink_domains_make_the_blocks,
    slurm.nvl72_trays_have_their_slurm,
    containers.burnin_image_is_runnable,
)


def check_inventory(ctx: InventoryContext, out: FindingCollector) -> None:
    for rule in RULES:
        rule(ctx, out)
