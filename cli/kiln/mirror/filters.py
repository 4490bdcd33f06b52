"""The roles' kiln_mirrored filter: every download source kiln's roles and version tables name
goes through it, so with kiln_mirror.url set the node fetches that source from the mirror
(kiln.mirror.layout's <root>/<host>/<path>), and without one from where it is published.

    "{{ 'https://github.com/NVIDIA/nccl-tests/archive/v2.13.6.tar.gz'
        | kiln_mirrored(kiln_mirror | default(none)) }}"

(`default(none)`: Ansible refuses an undefined variable as a filter's argument.)

A mirror that is set is used whether or not kiln_mirror.offline is: offline only adds validate's
refusal of sources the inventory writes outside it (kiln.inventory.rules.mirror).

    {{ kiln_os | kiln_archive_sources(kiln_arch, kiln_mirror) }}   # the base role's apt sources
"""

from __future__ import annotations

from collections.abc import Mapping

from kiln.mirror.archives import load_archives
from kiln.mirror.layout import mirrored


def _root(mirror: object) -> str | None:
    """kiln_mirror's url, None when there is none (kiln_mirror undefined, null, {} or without
    url). An undefined kiln_mirror arrives as Jinja's Undefined, which is no Mapping; isinstance
    is the one test that does not make a strict Undefined raise."""
    root = mirror.get("url") if isinstance(mirror, Mapping) else None
    return str(root) if root else None


def mirrored_filter(url: str, mirror: object = None) -> str:
    """`url` under the mirror of `mirror` (the kiln_mirror mapping); `url` unchanged when there
    is no mirror url."""
    return mirrored(str(url), _root(mirror))


def archive_sources(kiln_os: object, arch: object = "x86_64", mirror: object = None) -> list[dict]:
    """The distribution archive of a node's release (kiln.mirror.archives) as apt sources under
    the mirror: [{uris, suites, components, signed_by}]; [] without a mirror url, or for a
    release kiln has no archive entry for (dnf releases: their repositories stay the node's)."""
    root = _root(mirror)
    archive = load_archives().get(str(kiln_os)) if root else None
    if archive is None:
        return []
    return [
        {"uris": [mirrored(s.url, root)], "suites": list(s.suites),
         "components": list(s.components), "signed_by": archive.keyring}
        for s in archive.sources if str(arch) in s.arches
    ]  # fmt: skip


FILTERS = {"kiln_mirrored": mirrored_filter, "kiln_archive_sources": archive_sources}
