"""The distribution archives of each OS release (archives.yml): where a node's distribution
packages come from, and the keyring their signed indexes are checked with. `kiln mirror plan`
lists them, `kiln mirror fetch` reads them, and with kiln_mirror.url set the base role points
the node's apt at the mirror's copy of them (filter kiln_archive_sources)."""

from __future__ import annotations

import functools
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from kiln.profiles.platforms import Arch

ARCHIVES = Path(__file__).with_name("archives.yml")


class ArchiveSource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    suites: list[str]
    components: list[str]
    arches: list[Arch] = ["x86_64", "aarch64"]


class Archive(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    keyring: str  # a keyring file on the machine that fetches (its package installs it)
    sources: list[ArchiveSource]


@functools.cache
def load_archives() -> dict[str, Archive]:
    data = yaml.safe_load(ARCHIVES.read_text(encoding="utf-8")) or {}
    return {os_id: Archive.model_validate(entry) for os_id, entry in data.items()}
