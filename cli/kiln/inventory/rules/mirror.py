"""Offline mode (kiln_mirror.offline): every source the inventory names is in the mirror.

kiln's own sources (the roles' defaults, the version tables) go through the kiln_mirrored filter
whenever kiln_mirror.url is set; what an inventory writes itself is used as written, so here
each such source is checked where it is written: every role input named *_url (the roles name
every download source so: nvidia_repo_url, nccl_tests_url, burnin_pip_index_url,
infiniband_doca_repo_url, ...; tests/unit/test_mirror_sources.py holds them to it), in
group_vars or host_vars alike, and kiln_slurm.repository's url and key_url.
"""

from __future__ import annotations

from collections.abc import Iterator

from kiln.inventory.context import InventoryContext
from kiln.inventory.findings import FindingCollector, Origin
from kiln.inventory.mirror_spec import MirrorSpec
from kiln.inventory.schema import SlurmSpec
from kiln.mirror.layout import MirrorError, in_mirror, mirrored

URL_SUFFIX = "_url"


def sources_are_in_the_mirror(ctx: InventoryContext, out: FindingCollector) -> None:
    mirror, _ = ctx.cluster_value("kiln_mirror", MirrorSpec())
    if mirror is None or not mirror.offline or mirror.url is None:
        return  # unreadable (reported by kiln.inventory.values), or not offline
    for name, url, origin in _written_sources(ctx):
        if in_mirror(url, mirror.url):
            continue
        unset = "" if name.startswith("kiln_") else "; or unset it (its default is fetched there)"
        out.error(
            f"{name} {url} is outside the mirror {mirror.url} (kiln_mirror.offline is true)",
            origin=origin or ctx.written_at("kiln_mirror", "offline"),
            key=name.split(".")[0],
            hint=f"point it at the mirror's copy, {_copy(url, mirror.url)}{unset}",
        )


def _copy(url: str, root: str) -> str:
    """Where the mirror serves `url` (kiln.mirror.layout); its layout when `url` is not http(s)."""
    try:
        return mirrored(url, root)
    except MirrorError:
        return f"{root.rstrip('/')}/<host>/<path> of the source"


def _written_sources(ctx: InventoryContext) -> Iterator[tuple[str, str, Origin | None]]:
    """(name, URL, where written) of every source the inventory sets, once per place written
    (a group's value is one finding however many hosts inherit it)."""
    places = [*ctx.raw.groups.values(), *ctx.raw.hosts.values()]
    for place in places:
        for written in (place.file_vars, place.plugin_vars):
            for key, located in written.items():
                if not key.endswith(URL_SUFFIX) or ctx.typed.get(id(located), True) is None:
                    continue  # not a source, or refused already (a templated value)
                # "" is the roles' "none" (infiniband_doca_repo_url unless the stack is doca)
                if isinstance(located.value, str) and located.value:
                    yield key, located.value, located.origin
    slurm, _ = ctx.cluster_value("kiln_slurm", SlurmSpec())
    if slurm is not None and slurm.repository is not None:
        for field in ("url", "key_url"):
            yield (
                f"kiln_slurm.repository.{field}",
                getattr(slurm.repository, field),
                ctx.written_at("kiln_slurm", "repository", field),
            )
