"""Where Slurm comes from, and what a Slurm release can take in slurm.conf (slurm.yml).

`source_problems` answers whether a declared Slurm version can be had from a declared source on
a platform (`kiln_slurm.source: distribution` takes what the OS release ships; `repository` a
site's SchedMD-built packages at an exact version); `pin` the version the roles install and hold;
`conf_problems` which slurm.conf features the declared release lacks; `expected_version` what a
node's `slurmd -V` must say, and `installed` how the Slurm a node runs stands against it
(preflight). Nothing here prints.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any, Literal

from kiln.profiles._common import Dotted, Model, dotted, parse_version, read_yaml

SlurmSource = Literal["distribution", "repository"]
DAEMONS = ("slurmd", "slurmctld", "slurmdbd")  # what `-V` is read from, where installed
DEFAULT_PLATFORM = "debian-12"


class ShippedSlurm(Model):
    ships: Dotted  # the upstream version the OS release carries, e.g. 22.05.8
    package: str  # the archive's package version when it was read
    source: str  # where the figure was read
    repository: str | None = None  # an extra repository it comes from (EPEL)


class ConfFeature(Model):
    line: str  # what kiln writes into slurm.conf (or oci.conf)
    introduced: Dotted  # the first Slurm release that takes it
    source: str
    refused_by: str = "slurmctld would refuse slurm.conf"  # what happens with an older one


class SlurmProblem(Model):
    message: str
    hint: str


class SlurmTable(Model):
    distribution: dict[str, ShippedSlurm]
    conf_features: dict[str, ConfFeature]
    releases: list[str]  # the major releases, oldest first
    upgrade_window: dict[str, int]  # before_24.11 / from_24.11: releases back, in place

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
                        f"the cluster's Slurm is {release}: {feature.refused_by}",
                        hint=f"declare Slurm {feature.introduced} or newer "
                        "(kiln_versions.slurm, from a source that has it), or leave it off",
                    ),
                )
            )
    return found


def expected_version(declared: str | None, source: SlurmSource, platform: str) -> str | None:
    """The Slurm version a node must run: the declared one (a release, 22.05, takes any 22.05.x;
    an exact 22.05.8 only itself), or where none is declared what the platform ships (exact).
    None where kiln cannot tell (a platform the table lacks: validate refused it)."""
    if declared:
        return str(declared)
    try:
        return pin(None, source, platform)
    except ValueError:
        return None


def matches(expected: str, seen: str | None) -> bool:
    """`seen` (what `slurmd -V` says) is `expected`, by `_matches`' rule; nothing seen is not."""
    return seen is not None and _matches(str(expected), _numeric(seen))


# `slurmd -V` / `slurmctld -V`: a package name and the version, "slurm-wlm 24.11.5" on Debian 13
# (tests/fixtures/real/slurm-version), "slurm X.Y.Z" elsewhere; or the bare version a preflight
# run recorded from it.
_VERSION_LINE = re.compile(r"^\s*(?:slurm(?:-wlm)?\s+)?(\d+\.\d+(?:\.\d+)?\S*)\s*$")


def parse_version_output(text: str) -> str | None:
    """The version in `slurmd -V` or `slurmctld -V` output; None when it holds none."""
    for line in str(text or "").splitlines():
        found = _VERSION_LINE.match(line)
        if found:
            return found.group(1)
    return None


def upgrade_window(release: str) -> list[str]:
    """The releases `release` (24.11) upgrades from in place, oldest first; [] for a release
    this table does not know."""
    table = load_slurm()
    if release not in table.releases:
        return []
    at = table.releases.index(release)
    newer = parse_version(release) >= parse_version("24.11")
    back = table.upgrade_window["from_24.11" if newer else "before_24.11"]
    return table.releases[max(0, at - back) : at]


def upgrade_steps(installed: str, target: str) -> list[str] | None:
    """The releases to go through from `installed` to `target`, each within the window of the
    next ([] when one step does; None when either release is not in the table)."""
    releases = load_slurm().releases
    start, end = release_of(installed), release_of(target)
    if start not in releases or end not in releases:
        return None
    steps, current = [], start
    while current not in upgrade_window(end) and current != end:
        reachable = [r for r in releases if current in upgrade_window(r)
                     and parse_version(r) < parse_version(end)]  # fmt: skip
        if not reachable:
            return None
        current = reachable[-1]  # the furthest release one step takes
        steps.append(current)
    return steps


def _numeric(version: str) -> str:
    """'23.11.0' from '23.11.0-0rc1': the dotted numeric head of a version."""
    found = re.match(r"\d+(?:\.\d+)*", version)
    return found.group(0) if found else "0"


class InstalledSlurm(Model):
    """How the Slurm daemons installed on a node stand against the expected version."""

    expected: str | None  # what `-V` must say (expected_version)
    installs: str | None  # what the slurm stage installs and holds (pin)
    seen: dict[str, str | None]  # daemon -> its version, None where it is not installed
    notes: list[str]  # another version that the slurm stage replaces: reported, not fatal
    older: dict[str, str]  # daemon -> its version, where the slurm stage upgrades it in place
    problems: list[str]  # a version the slurm stage would downgrade: Slurm does not support it


def installed(
    readings: dict[str, str | None], declared: str | None, source: SlurmSource, platform: str
) -> InstalledSlurm:
    """Judge `readings` (daemon -> `-V` output, None where the daemon is not installed).

    Not installed: fine, the slurm stage installs it. Another version older than expected: a
    note (the slurm stage upgrades it and holds it there). A newer one: a problem, because the
    slurm stage would downgrade it and Slurm does not support downgrades (slurmctld cannot read
    the state a newer release saved); the operator declares that version or removes it."""
    expected = expected_version(declared, source, platform)
    try:
        installs: str | None = pin(declared, source, platform)
    except ValueError:
        installs = None
    seen = {name: parse_version_output(text) if text else None for name, text in readings.items()}
    notes, problems, older = [], [], {}
    wanted = (
        f"Slurm {expected} is declared"
        if declared
        else f"{platform} ships Slurm {expected} (kiln_versions.slurm is not set)"
    )
    for name, version in sorted(seen.items()):
        if version is None or expected is None or matches(expected, version):
            continue
        said = f"{name} -V says {version}, but {wanted}"
        depth = len(expected.split("."))
        newer = parse_version(_numeric(version))[:depth] > parse_version(expected)[:depth]
        steps = None if newer else upgrade_steps(version, expected)
        if newer:
            problems.append(
                f"{said}: the slurm stage would downgrade it to {installs or expected}, which "
                "Slurm does not support; declare the installed version, or remove it by hand"
            )
        elif steps:  # beyond the window: slurmctld's state and slurmdbd's database are lost
            target = release_of(expected)
            window = ", ".join(upgrade_window(target))
            problems.append(
                f"{said}: Slurm {target} upgrades in place from {window} only, and "
                f"{release_of(version)} is further back (its state and accounting database "
                f"would be lost); upgrade through {' then '.join(steps)} first: declare "
                f"{steps[0]}, provision, and go on"
            )
        else:
            notes.append(f"{said}: the slurm stage replaces it with {installs or expected}")
            older[name] = version
    return InstalledSlurm(
        expected=expected, installs=installs, seen=seen, notes=notes, problems=problems, older=older
    )


def daemon_lines(text: str) -> dict[str, str]:
    """daemon -> its `-V` output, from the lines `DAEMON<TAB>its -V output` the slurm roles and
    `kiln plan --live` print (DAEMON_VERSIONS; a `-V` of several lines continues on the next)."""
    found: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        head, tab, rest = line.partition("\t")
        if tab and head in DAEMONS:
            name, found[head] = head, rest
        elif name is not None:
            found[name] = f"{found[name]}\n{line}"
    return found


# What prints those lines on a host: each Slurm daemon installed there (root's sbin searched).
DAEMON_VERSIONS = (
    'PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"; for daemon in ' + " ".join(DAEMONS) + "; do "
    'if command -v "$daemon" >/dev/null 2>&1; then '
    'printf \'%s\\t%s\\n\' "$daemon" "$("$daemon" -V 2>&1)"; fi; done'
)


def installed_filter(
    readings: Any, declared: Any = None, source: Any = "distribution", platform: Any = None
) -> dict[str, Any]:
    """The preflight role's kiln_slurm_installed filter: `installed` with Ansible's values;
    `readings` a mapping, or the role's lines `DAEMON<TAB>its -V output` (one per installed
    daemon; a `-V` that printed several lines continues on the next ones)."""
    text = None if declared in (None, "") else dotted(declared)
    if isinstance(readings, str):
        found: dict[str, str | None] = dict(daemon_lines(readings))
    else:
        found = {str(k): (str(v) if v else None) for k, v in dict(readings or {}).items()}
    judged = installed(found, text, source or "distribution", str(platform or DEFAULT_PLATFORM))
    return judged.model_dump()


@functools.cache
def load_slurm() -> SlurmTable:
    """The Slurm sources and slurm.conf feature table from slurm.yml."""
    return SlurmTable.model_validate(read_yaml("slurm.yml"))


def pin_filter(declared: Any, source: Any = "distribution", platform: Any = None) -> str:
    """The roles' kiln_slurm_pin filter: `pin` with Ansible's loose values."""
    text = None if declared in (None, "") else dotted(declared)
    return pin(text, source or "distribution", str(platform or DEFAULT_PLATFORM))


def version_said_filter(text: Any) -> str | None:
    """The roles' kiln_slurm_version_said filter: the version in a daemon's `-V` output."""
    return parse_version_output(str(text or ""))


FILTERS = {
    "kiln_slurm_pin": pin_filter,
    "kiln_slurm_installed": installed_filter,
    "kiln_slurm_version_said": version_said_filter,
}
