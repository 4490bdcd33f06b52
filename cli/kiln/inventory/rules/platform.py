"""The OS a node declares (kiln_os, kiln_arch) against what kiln's NVIDIA stack supports.

An OS kiln has no entry for, an architecture NVIDIA publishes no repository for on that OS, or a
driver branch that OS's repository does not carry is refused here, with file:line, instead of
half-way through the nvidia stage (kiln.profiles platforms.yml holds the table); so is
nvidia_driver_source: distribution where kiln has no list of the distribution's driver packages
(only Debian's archive carries them in a form kiln installs).
"""

from __future__ import annotations

from kiln.inventory.context import InventoryContext
from kiln.inventory.findings import FindingCollector
from kiln.inventory.resolve import ResolvedHost
from kiln.profiles import load_compat
from kiln.profiles.platforms import load_platforms


def os_is_supported(ctx: InventoryContext, host: ResolvedHost, out: FindingCollector) -> None:
    table = load_platforms()
    os_id = ctx.value(host, "kiln_os", table.default["os"])
    arch = ctx.value(host, "kiln_arch", table.default["arch"])
    if os_id is None or arch is None:
        return  # not a string: reported by kiln.inventory.values
    branch = None
    profile = ctx.profile(host)
    amd = profile is not None and profile.vendor == "amd"
    if ctx.gpu_count(host) and ctx.versions is not None and not amd:
        branch = int(ctx.versions.driver_branch)
    for problem in table.problems(os_id, arch, branch):
        if "driver" in problem:
            key, origin = "kiln_versions.driver_branch", ctx.written_at("kiln_versions")
        elif problem.startswith("kiln_arch") or "repository for" in problem:
            key, origin = "kiln_arch", ctx.origin_of(host, "kiln_arch")
        else:
            key, origin = "kiln_os", None
        out.error(
            f"{host.name}: {problem}",
            origin=origin or ctx.origin_of(host, "kiln_os") or ctx.declared_at(host.name),
            key=key,
            host=host.name,
            hint="see docs/gpu.md, Platforms: which OS releases, architectures and driver "
            "branches kiln's NVIDIA stack runs on",
        )

    if amd and ctx.gpu_count(host) and ctx.versions is not None:
        rocm = ctx.versions.rocm
        for what, problem in load_compat().check_rocm(rocm, profile, os_id):
            if what == "os":
                key, origin = "kiln_os", ctx.origin_of(host, "kiln_os")
            elif rocm is None:  # not written anywhere: point at the AMD model
                key, origin = "kiln_versions.rocm", ctx.origin_of(host, "kiln_gpu_model")
            else:
                key, origin = "kiln_versions.rocm", ctx.written_at("kiln_versions", "rocm")
            out.error(
                f"{host.name}: {problem}",
                origin=origin or ctx.declared_at(host.name),
                key=key,
                host=host.name,
                hint="see docs/gpu.md, AMD Instinct: the ROCm releases and platforms kiln installs",
            )

    source = host.vars.get("nvidia_driver_source")
    platform = table.get(os_id)
    if (
        branch is not None
        and platform is not None
        and source is not None
        and source.value == "distribution"
        and platform.driver.distribution is None
    ):
        out.error(
            f"{host.name}: nvidia_driver_source: distribution is not offered on {platform.name}:"
            " kiln installs the driver there from NVIDIA's repository only (cuda)",
            origin=source.origin or ctx.declared_at(host.name),
            key="nvidia_driver_source",
            host=host.name,
            hint="see docs/gpu.md, Platforms",
        )
