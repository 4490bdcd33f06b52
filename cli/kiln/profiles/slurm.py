"""Where Slurm comes from, and what a Slurm release can take in slurm.conf (slurm.yml).

`source_problems` answers whether a declared Slurm version can be had from a declared source on
a platform (`kiln_slurm.source: distribution` takes what the OS release ships; `repository` a
site's SchedMD-built packages at an exact version); `pin` the version the roles install and hold;
`conf_problems` which slurm.conf features the declared release lacks. Nothing here prints.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, Literal

from kiln.profiles._common import Dotted, Model, dotted, parse_version, read_yaml

SlurmSource = Literal["distribution", "repository"]
DEFAULT_PLATFORM = "debian-12"


class ShippedSlurm(Model):
    ships: Dotted  # the upstream version the OS release carries, e.g. 22.05.8
    package: str  # the archive's package version when it was read
    source: str  # where the figure was read
    repository: str | None = None  # an extra repository it comes from (EPEL)


class ConfFeature(Model):
    line: str  # what kiln writes into slurm.conf
    introduced: Dotted  # the first Slurm release that takes it
    source: str


class SlurmProblem(Model):
    message: str
    hint: str


class SlurmTable(Model):
    distribution: dict[str, ShippedSlurm]
    conf_features: dict[str, ConfFeature]

    def shipped(self, platform: str) -> ShippedSlurm | None:
        return self.distribution.get(platform)


def release_of(version: str) -> str:
    """'22.05' from '22.05.8' (or from '22.05')."""
    return ".".join(str(version).split(".")[:2])


def _matches(declared: str, ships: str) -> bool:
    """A declared release (22.05) takes any version of it; an exact one (22.05.8) only itself."""
    if len(declared.split(".")) <= 2:
        return release_of(ships) == release_of(declared)
    return parse_version(ships) == parse_version(declared)


def source_problems(declared: str | None, source: SlurmSource, platform: str) -> list[SlurmProblem]:
    """Why `declared` cannot be had from `source` on `platform`; empty when it can. None declared
    with the distribution source takes what the platform ships."""
    table = load_slurm()
    if source == "repository":
        if declared is None or len(declared.split(".")) != 3:
            return [
                SlurmProblem(
                    message=f"kiln_slurm.source is repository but kiln_versions.slurm is "
                    f"{declared or 'not set'}: a repository is pinned to an exact version",
                    hint="declare the exact version the repository carries, e.g. '24.05.8'",
                )
            ]
        return []
    shipped = table.shipped(platform)
    if shipped is None:
        known = ", ".join(sorted(table.distribution))
        return [
            SlurmProblem(
                message=f"kiln does not know which Slurm {platform} ships",
                hint=f"use a platform kiln knows ({known}), or kiln_slurm.source: repository",
            )
        ]
    if declared is not None and not _matches(declared, shipped.ships):
        return [
            SlurmProblem(
                message=f"Slurm {declared} is not what {platform} ships: its distribution "
                f"provides Slurm {shipped.ships} ({shipped.package})",
                hint=f"declare kiln_versions.slurm: '{release_of(shipped.ships)}', or take "
                f"{declared} from a repository of SchedMD-built packages "
                "(kiln_slurm.source: repository)",
            )
        ]
    return []


def pin(declared: str | None, source: SlurmSource, platform: str) -> str:
    """The upstream version the roles install and hold: what the platform ships (distribution),
    or the exact declared version (repository). Raises ValueError where validate refuses."""
    problems = source_problems(declared, source, platform)
    if problems:
        raise ValueError(problems[0].message)
    if source == "repository":
        return str(declared)
    shipped = load_slurm().shipped(platform)
    assert shipped is not None  # source_problems said so
    return shipped.ships


def effective_release(declared: str | None, source: SlurmSource, platform: str) -> str | None:
    """The Slurm release a cluster gets: the declared one, else what the platform ships."""
    if declared is not None:
        return release_of(declared)
    shipped = load_slurm().shipped(platform) if source == "distribution" else None
    return release_of(shipped.ships) if shipped else None


def conf_problems(release: str, features: Iterable[str]) -> list[tuple[str, SlurmProblem]]:
    """(feature, problem) for each slurm.conf feature Slurm `release` does not take."""
    table = load_slurm()
    found = []
    for name in features:
        feature = table.conf_features[name]
        if parse_version(release_of(release)) < parse_version(feature.introduced):
            found.append(
                (
                    name,
                    SlurmProblem(
                        message=f"{feature.line} needs Slurm {feature.introduced} or newer; "
                        f"the cluster's Slurm is {release}: slurmctld would refuse slurm.conf",
                        hint=f"declare Slurm {feature.introduced} or newer "
                        "(kiln_versions.slurm, from a source that has it), or leave it off",
                    ),
                )
            )
    return found


@functools.cache
def load_slurm() -> SlurmTable:
    """The Slurm sources and slurm.conf feature table from slurm.yml."""
    return SlurmTable.model_validate(read_yaml("slurm.yml"))


def pin_filter(declared: Any, source: Any = "distribution", platform: Any = None) -> str:
    """The roles' kiln_slurm_pin filter: `pin` with Ansible's loose values."""
    text = None if declared in (None, "") else dotted(declared)
    return pin(text, source or "distribution", str(platform or DEFAULT_PLATFORM))


FILTERS = {"kiln_slurm_pin": pin_filter}
