"""Rules about the Slurm a cluster gets: its source has the declared version on every node's
platform, slurm.conf holds nothing that version lacks (kiln.profiles.slurm's table), the
nodes can reach it in place from what the last preflight read they run (Slurm's window), and
NVL72 trays (GB200, GB300) get the Slurm 24.05 their IMEX channels and blocks need."""

from __future__ import annotations

from kiln.inventory.containers_spec import ContainersSpec
from kiln.inventory.context import COMPUTE, InventoryContext
from kiln.inventory.findings import FindingCollector, Origin
from kiln.inventory.resolve import ResolvedHost
from kiln.inventory.schema import SlurmSpec, VersionsSpec
from kiln.profiles import parse_version
from kiln.profiles.slurm import (
    DEFAULT_PLATFORM,
    conf_problems,
    effective_release,
    installed,
    source_problems,
)

PLATFORM_KEY = "kiln_os"


def _platform_of(ctx: InventoryContext, host: ResolvedHost) -> tuple[str, Origin | None]:
    """A host's declared platform (kiln_os, e.g. debian-12) and where it is written; the default
    platform when unset. The one place these rules read it."""
    located = host.vars.get(PLATFORM_KEY)
    if located is None:
        return DEFAULT_PLATFORM, None
    value = ctx.typed.get(id(located), located.value)
    return (str(value) if value else DEFAULT_PLATFORM), located.origin


def slurm_comes_from_its_source(ctx: InventoryContext, out: FindingCollector) -> None:
    """The declared kiln_versions.slurm is one the declared source provides on every platform
    the cluster's hosts run (the distribution's own Slurm, or an exact repository version)."""
    declared, slurm = _declared(ctx)
    if slurm is None:
        return
    for platform, (hosts, origin) in _platforms(ctx).items():
        for problem in source_problems(declared, slurm.source, platform):
            where = (
                ctx.written_at("kiln_versions", "slurm")
                or origin
                or ctx.written_at("kiln_slurm", "source")
                or ctx.declared_at(hosts[0])
            )
            out.error(
                f"{problem.message} (hosts: {_few(hosts)})",
                origin=where,
                key="kiln_versions.slurm",
                hint=problem.hint,
            )


def slurm_conf_fits_the_release(ctx: InventoryContext, out: FindingCollector) -> None:
    """Every slurm.conf option and plugin kiln will write is one the cluster's Slurm takes."""
    declared, slurm = _declared(ctx)
    if slurm is None:
        return
    releases = {effective_release(declared, slurm.source, platform) for platform in _platforms(ctx)}
    features = _conf_features(ctx, slurm)
    for release in sorted(r for r in releases if r is not None):
        for name, problem in conf_problems(release, features):
            key, field = _FEATURE_KEYS[name]
            out.error(
                problem.message,
                origin=ctx.written_at(key, field) or ctx.written_at("kiln_versions", "slurm"),
                key=f"{key}.{field}",
                hint=problem.hint,
            )


def slurm_upgrade_is_within_the_window(ctx: InventoryContext, out: FindingCollector) -> None:
    """The declared Slurm is one the hosts can be upgraded to in place from what the last
    preflight run read they run: no downgrade, no jump beyond Slurm's compatibility window
    (the slurm stage refuses both on the hosts too, before anything changes)."""
    recorded = ctx.recorded_slurm
    declared, slurm = _declared(ctx)
    if recorded is None or slurm is None:
        return
    refused: dict[str, list[str]] = {}  # problem -> hosts
    for name, versions in sorted(recorded.versions.items()):
        host = ctx.hosts.get(name)
        if host is None:  # no longer in the inventory
            continue
        platform, _ = _platform_of(ctx, host)
        for problem in installed(dict(versions), declared, slurm.source, platform).problems:
            refused.setdefault(problem, []).append(name)
    for problem, hosts in refused.items():
        out.error(
            f"{problem} (as preflight run {recorded.run_id} read it on {_few(hosts)})",
            origin=ctx.written_at("kiln_versions", "slurm") or ctx.declared_at(hosts[0]),
            key="kiln_versions.slurm",
            hint="declare a release within the window of what the nodes run, and go on from there",
        )


# The inventory key that makes kiln write each feature of the table.
_FEATURE_KEYS = {
    "switch/nvidia_imex": ("kiln_slurm", "imex"),
    "topology/block": ("kiln_slurm", "topology"),
    "oci.conf/MountSpoolDir": ("kiln_containers", "runtime"),
}


def _conf_features(ctx: InventoryContext, slurm: SlurmSpec) -> list[str]:
    """The table's features kiln writes for these settings (templates/slurm.conf.j2, the
    slurm_oci role's oci.conf)."""
    containers, _ = ctx.cluster_value("kiln_containers", ContainersSpec())
    features = ["switch/nvidia_imex"] if slurm.imex else []
    if slurm.topology == "block":
        features.append("topology/block")
    if containers.enabled and containers.runtime == "oci":
        features.append("oci.conf/MountSpoolDir")
    return features


def _declared(ctx: InventoryContext) -> tuple[str | None, SlurmSpec | None]:
    """The written kiln_versions.slurm (None when unset: the distribution's own Slurm) and
    kiln_slurm."""
    written, _ = ctx.cluster_value("kiln_versions", VersionsSpec())
    slurm, _ = ctx.cluster_value("kiln_slurm", SlurmSpec())
    if written is None:
        return None, None
    return written.slurm, slurm


def _platforms(ctx: InventoryContext) -> dict[str, tuple[list[str], Origin | None]]:
    found: dict[str, tuple[list[str], Origin | None]] = {}
    for name, host in ctx.hosts.items():
        platform, origin = _platform_of(ctx, host)
        hosts, first = found.setdefault(platform, ([], origin))
        hosts.append(name)
    return found


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


NVLINK_DOMAIN_KEY = "kiln_nvlink_domain"
NVL72_SLURM = "24.05"  # switch/nvidia_imex and topology/block's BlockSizes (profiles/slurm.yml)


def nvl72_trays_have_their_slurm(ctx: InventoryContext, out: FindingCollector) -> None:
    """A tray of a multi-node NVLink domain runs under Slurm 24.05 or newer, naming both; one
    that names no kiln_nvlink_domain is a warning (no block, no fabric gate for it)."""
    declared, slurm = _declared(ctx)
    if slurm is None:
        return
    old: dict[tuple[str, str], list[str]] = {}
    unnamed: list[str] = []
    for name in ctx.membership.get(COMPUTE, []):
        host = ctx.hosts[name]
        profile = ctx.profile(host)
        if profile is None or not profile.nvlink_domain_nodes:
            continue
        if not ctx.value(host, NVLINK_DOMAIN_KEY):
            unnamed.append(name)
        platform, _ = _platform_of(ctx, host)
        release = effective_release(declared, slurm.source, platform)
        if release and parse_version(release) < parse_version(NVL72_SLURM):
            old.setdefault((profile.id, release), []).append(name)
    for (model, release), hosts in old.items():
        out.error(
            f"{model} trays ({', '.join(hosts[:3])}{' ...' if len(hosts) > 3 else ''}) need "
            f"Slurm {NVL72_SLURM} or newer (switch/nvidia_imex, topology/block); the cluster's "
            f"Slurm is {release}",
            origin=ctx.written_at("kiln_versions", "slurm") or ctx.declared_at(hosts[0]),
            key="kiln_versions.slurm",
            hint=f"declare Slurm {NVL72_SLURM} or newer (kiln_versions.slurm, from a source "
            "that has it)",
        )
    if unnamed:
        out.warning(
            f"{len(unnamed)} NVL72 tray(s) name no {NVLINK_DOMAIN_KEY} ({', '.join(unnamed[:3])}"
            f"{' ...' if len(unnamed) > 3 else ''}): no Slurm block and no NVLink fabric gate "
            "for them",
            origin=ctx.declared_at(unnamed[0]),
            key=NVLINK_DOMAIN_KEY,
            hint=f"set {NVLINK_DOMAIN_KEY} to the rack's ClusterUUID.CliqueId (nvidia-smi -q) "
            "or its name",
        )
