"""Rules about one host: its name, its address, its groups and its hardware against its profile.

Each is called once per host (rules.EachHost); a finding that many hosts share (a bad value
written once in group_vars/) is folded into one, listing the hosts.
"""

from __future__ import annotations

import ipaddress
import re

from kiln.inventory.context import COMPUTE, CONTROLLERS, InventoryContext
from kiln.inventory.findings import FindingCollector, suggest
from kiln.inventory.resolve import ResolvedHost

RFC1123_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
DNS_NAME = re.compile(
    r"^(?=.{1,253}$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?$"
)
# AMD Instinct models as operators write them ("mi300x", "MI325X", "amd-mi300x", "instinct-mi250x")
AMD_INSTINCT = re.compile(r"^(amd[-_ ]?)?(instinct[-_ ]?)?mi\d{3}[a-z]*$", re.IGNORECASE)
NODE_SHAPE_KEYS = ("sockets", "cores_per_socket", "threads_per_core", "real_memory_mb")


def name_is_a_label(ctx: InventoryContext, host: ResolvedHost, out: FindingCollector) -> None:
    """Slurm and /etc/hosts need the short name: an RFC 1123 label."""
    name = host.name
    if RFC1123_LABEL.match(name):
        return
    hint = (
        "use the short host name; put the FQDN in ansible_host"
        if "." in name
        else "use lowercase letters, digits and '-' (at most 63), not starting or ending with '-'"
    )
    out.error(
        f"host name '{name}' is not a valid RFC 1123 label",
        origin=ctx.declared_at(name),
        key=name,
        hint=hint,
    )


def one_address_per_host(ctx: InventoryContext, host: ResolvedHost, out: FindingCollector) -> None:
    """A host declared in several places must not be given two addresses."""
    addresses = ctx.raw.hosts[host.name].addresses
    distinct = {str(a.value) for a in addresses}
    if len(distinct) > 1:
        out.error(
            f"host '{host.name}' is declared more than once with different addresses "
            f"({', '.join(sorted(distinct))})",
            origin=addresses[-1].origin,
            key="ansible_host",
            hint="declare the host once, or give it one address",
        )


def address_is_ip_or_dns(ctx: InventoryContext, host: ResolvedHost, out: FindingCollector) -> None:
    address = ctx.address(host)
    if _valid_address(address):
        return
    out.error(
        f"ansible_host {address!r} of '{host.name}' is neither an IP address nor a DNS name",
        origin=ctx.origin_of(host, "ansible_host") or ctx.declared_at(host.name),
        key="ansible_host",
    )


def in_a_kiln_group(ctx: InventoryContext, host: ResolvedHost, out: FindingCollector) -> None:
    """A host in neither kiln group is never provisioned: say so, in case it is a slip."""
    if CONTROLLERS in host.groups or COMPUTE in host.groups:
        return
    out.warning(
        f"host '{host.name}' is in neither {CONTROLLERS} nor {COMPUTE}; kiln leaves it alone",
        origin=ctx.declared_at(host.name),
        key=host.name,
    )


def gpu_model_is_known(ctx: InventoryContext, host: ResolvedHost, out: FindingCollector) -> None:
    """A compute node names its hardware profile, and the profile exists."""
    model = ctx.value(host, "kiln_gpu_model")
    origin = ctx.origin_of(host, "kiln_gpu_model")
    if origin is None:
        if COMPUTE in host.groups:
            out.error(
                f"compute node '{host.name}' has no kiln_gpu_model",
                origin=ctx.declared_at(host.name),
                key="kiln_gpu_model",
                host=host.name,
                hint="set kiln_gpu_model (a profile id such as h100-sxm, or none) "
                "for the group in group_vars/",
            )
            return
        model = "none"
    if model is None or model in ctx.profiles:
        return
    if AMD_INSTINCT.match(str(model)):
        # not a typo of an NVIDIA model: name the AMD profiles kiln has
        amd = [p.id for p in ctx.profiles.values() if p.vendor == "amd"]
        same = [p for p in amd if str(model).lower().endswith(p)]
        out.error(
            f"GPU model '{model}' is an AMD Instinct kiln has no profile for",
            origin=origin,
            key="kiln_gpu_model",
            host=host.name,
            hint=f"write it as {same[0]}"
            if same
            else f"kiln's AMD Instinct profiles: {', '.join(amd)} (docs/gpu.md, AMD Instinct)",
        )
        return
    out.error(
        f"unknown GPU model '{model}'",
        origin=origin,
        key="kiln_gpu_model",
        host=host.name,
        hint=suggest(model, ctx.profiles) or f"known models: {', '.join(ctx.profiles)}",
    )


def gpu_count_in_profile_range(
    ctx: InventoryContext, host: ResolvedHost, out: FindingCollector
) -> None:
    profile = ctx.profile(host)
    if profile is None:
        return
    count = ctx.value(host, "kiln_gpu_count", profile.gpu_count_default)
    if count is None or profile.gpu_count_min <= count <= profile.gpu_count_max:
        return
    out.error(
        f"kiln_gpu_count {count} is outside {profile.id}'s range "
        f"{profile.gpu_count_min}..{profile.gpu_count_max}",
        origin=ctx.origin_of(host, "kiln_gpu_count") or ctx.declared_at(host.name),
        key="kiln_gpu_count",
        host=host.name,
        hint=f"{profile.name} systems carry {profile.gpu_count_default} GPUs",
    )


def power_limit_in_profile_range(
    ctx: InventoryContext, host: ResolvedHost, out: FindingCollector
) -> None:
    profile, power = ctx.profile(host), ctx.value(host, "kiln_power")
    if profile is None or power is None or power.power_limit_w is None:
        return
    low, high = profile.power_limit_min_w, profile.power_limit_max_w
    if low is None or low <= power.power_limit_w <= high:
        return
    out.error(
        f"kiln_power.power_limit_w {power.power_limit_w} W is outside "
        f"{profile.id}'s range {low}..{high} W",
        origin=ctx.origin_of(host, "kiln_power"),
        key="kiln_power",
        host=host.name,
        hint=f"pick a limit between {low} and {high} W",
    )


def hcas_listed_once(ctx: InventoryContext, host: ResolvedHost, out: FindingCollector) -> None:
    """One HCA per rail: the same HCA twice would make two rails of one port."""
    hcas = ctx.value(host, "kiln_ib_hcas")
    if hcas and len(set(hcas)) != len(hcas):
        out.error(
            f"kiln_ib_hcas lists an HCA twice: {hcas}",
            key="kiln_ib_hcas",
            origin=ctx.origin_of(host, "kiln_ib_hcas"),
            host=host.name,
        )


def node_shape_is_positive(
    ctx: InventoryContext, host: ResolvedHost, out: FindingCollector
) -> None:
    """Sockets, cores, threads and memory written for a host are at least 1 (Slurm's floor)."""
    for field in NODE_SHAPE_KEYS:
        number = ctx.value(host, f"kiln_{field}")
        if number is not None and number < 1:
            out.error(
                f"kiln_{field} must be at least 1, got {number}",
                host=host.name,
                origin=ctx.origin_of(host, f"kiln_{field}"),
                key=f"kiln_{field}",
            )


def _valid_address(text: str) -> bool:
    # The name first: it is the cheaper test, and it passes most IPv4 addresses as well.
    if DNS_NAME.match(text):
        return True
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False
