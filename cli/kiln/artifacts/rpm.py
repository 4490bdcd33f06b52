"""dnf repository indexes read, and rpm packages resolved there as dnf would. Pure: text in,
packages out (kiln.artifacts.dnfrepo fetches and checks them).

    files = read_repomd(repomd_text)            # what the repository's repomd.xml lists
    index = RpmIndex()
    index.add(primary_xml_bytes, "https://developer.download.nvidia.com/.../rhel9/x86_64")
    found = resolve(index, [("libnccl", "2.25.1-1+cuda12.8"), ("chrony", "")], "x86_64")
    found.packages     # the newest match of each, and every requirement's provider here
    found.missing      # asked for at a version these repositories do not have
    found.elsewhere    # names and requirements no repository here offers: the node's own

A requirement is met the way rpm meets it: by a package's name, one of its Provides (versions
compared with rpmvercmp, the release only where both sides have one), or a file it lists.
What no repository of the plan offers is left to the node's own repositories (a RHEL node's
BaseOS and AppStream are the site's, through its Satellite or mirror), and said.
"""

from __future__ import annotations

import fnmatch
import functools
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import NamedTuple

_COMMON = "{http://linux.duke.edu/metadata/common}"
_RPM = "{http://linux.duke.edu/metadata/rpm}"
_REPO = "{http://linux.duke.edu/metadata/repo}"
# rpm's own capabilities (rpmlib(...)): the rpm on the node has them, nothing to fetch
_BUILTIN = ("rpmlib(", "config(")


class RpmIndexError(ValueError):
    """A repomd.xml or primary index that cannot be read; the text says where."""


@dataclass(frozen=True)
class RepoFile:
    kind: str  # primary, filelists, other, modules, group, updateinfo, ...
    href: str  # relative to the repository's URL
    sha256: str
    size: int


def read_repomd(text: str) -> list[RepoFile]:
    """The index files a repomd.xml lists, each with its sha256."""
    try:
        root = ET.fromstring(text)  # noqa: S314 - signed index, checked before it is read
    except ET.ParseError as exc:
        raise RpmIndexError(f"repomd.xml is not XML: {exc}") from None
    files = []
    for data in root.iter(f"{_REPO}data"):
        checksum, location = data.find(f"{_REPO}checksum"), data.find(f"{_REPO}location")
        size = data.find(f"{_REPO}size")
        if checksum is None or location is None or checksum.get("type") != "sha256":
            raise RpmIndexError(f"repomd.xml: {data.get('type')} has no sha256 and location")
        files.append(RepoFile(data.get("type", ""), location.get("href", ""),
                              (checksum.text or "").strip(),
                              int(size.text or 0) if size is not None else 0))  # fmt: skip
    return files


class Relation(NamedTuple):
    name: str
    flags: str  # "" (any version), EQ, LT, LE, GT, GE
    evr: tuple[str, str, str]  # epoch, version, release ("" where not given)


@dataclass(frozen=True)
class Rpm:
    name: str
    arch: str
    evr: tuple[str, str, str]
    url: str
    sha256: str
    size: int
    provides: tuple[Relation, ...] = ()
    requires: tuple[Relation, ...] = ()
    files: tuple[str, ...] = ()

    @property
    def version(self) -> str:
        return evr_text(self.evr)


def evr_text(evr: tuple[str, str, str]) -> str:
    """E:V-R as rpm prints it (no epoch 0, no release where none is given)."""
    epoch, version, release = evr
    text = f"{epoch}:{version}" if epoch not in ("", "0") else version
    return f"{text}-{release}" if release else text


def _relations(element: ET.Element | None) -> tuple[Relation, ...]:
    if element is None:
        return ()
    return tuple(
        Relation(e.get("name", ""), e.get("flags", ""),
                 (e.get("epoch", ""), e.get("ver", ""), e.get("rel", "")))
        for e in element.iter(f"{_RPM}entry")
    )  # fmt: skip


def read_primary(xml: bytes, base: str) -> list[Rpm]:
    """The packages of a primary index, their URLs under the repository at `base`."""
    try:
        root = ET.fromstring(xml)  # noqa: S314 - its sha256 is the signed repomd.xml's
    except ET.ParseError as exc:
        raise RpmIndexError(f"primary index is not XML: {exc}") from None
    packages = []
    for p in root.iter(f"{_COMMON}package"):
        version, checksum = p.find(f"{_COMMON}version"), p.find(f"{_COMMON}checksum")
        location, size = p.find(f"{_COMMON}location"), p.find(f"{_COMMON}size")
        fmt = p.find(f"{_COMMON}format")
        if version is None or checksum is None or location is None or fmt is None:
            raise RpmIndexError(f"primary index: package {p.findtext(f'{_COMMON}name')} is cut")
        if checksum.get("type") != "sha256":
            raise RpmIndexError(f"primary index: {checksum.get('type')} checksums, not sha256")
        packages.append(Rpm(
            name=p.findtext(f"{_COMMON}name", ""), arch=p.findtext(f"{_COMMON}arch", ""),
            evr=(version.get("epoch", "0"), version.get("ver", ""), version.get("rel", "")),
            url=f"{base.rstrip('/')}/{location.get('href', '')}",
            sha256=(checksum.text or "").strip(),
            size=int(size.get("package", 0)) if size is not None else 0,
            provides=_relations(fmt.find(f"{_RPM}provides")),
            requires=_relations(fmt.find(f"{_RPM}requires")),
            files=tuple(f.text or "" for f in fmt.iter(f"{_COMMON}file")),
        ))  # fmt: skip
    return packages


def _alnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


def vercmp(a: str, b: str) -> int:
    """rpm's rpmvercmp: -1, 0 or 1 (segments of digits or letters; ~ sorts before anything,
    even the end; ^ after the end but before anything else)."""
    if a == b:
        return 0
    i = j = 0
    while i < len(a) or j < len(b):
        while i < len(a) and not _alnum(a[i]) and a[i] not in "~^":
            i += 1
        while j < len(b) and not _alnum(b[j]) and b[j] not in "~^":
            j += 1
        x, y = a[i : i + 1], b[j : j + 1]
        if "~" in (x, y):
            if x != "~":
                return 1
            if y != "~":
                return -1
            i, j = i + 1, j + 1
            continue
        if "^" in (x, y):
            if not x:
                return -1
            if not y:
                return 1
            if x != "^":
                return 1
            if y != "^":
                return -1
            i, j = i + 1, j + 1
            continue
        if not (x and y):
            break
        kind = str.isdigit if x.isdigit() else str.isalpha
        si, sj = i, j
        while i < len(a) and a[i].isascii() and kind(a[i]):
            i += 1
        while j < len(b) and b[j].isascii() and kind(b[j]):
            j += 1
        one, two = a[si:i], b[sj:j]
        if not two:  # a number against letters: the number is newer
            return 1 if kind is str.isdigit else -1
        if kind is str.isdigit:
            one, two = one.lstrip("0"), two.lstrip("0")
            if len(one) != len(two):
                return 1 if len(one) > len(two) else -1
        if one != two:
            return 1 if one > two else -1
    if i >= len(a) and j >= len(b):
        return 0
    return 1 if i < len(a) else -1


def evr_compare(one: tuple[str, str, str], two: tuple[str, str, str]) -> int:
    """Two (epoch, version, release) as rpm orders them; a release missing on either side is
    not compared (a requirement on `2.0` is met by 2.0-1 and 2.0-7)."""
    epochs = vercmp(one[0] or "0", two[0] or "0")
    if epochs:
        return epochs
    versions = vercmp(one[1], two[1])
    if versions or not (one[2] and two[2]):
        return versions
    return vercmp(one[2], two[2])


_HOLDS = {"EQ": (0,), "LT": (-1,), "LE": (-1, 0), "GT": (1,), "GE": (1, 0)}


def satisfies(provided: Relation, required: Relation) -> bool:
    """Whether a Provides meets a Requires of the same name (an unversioned side: always)."""
    if not required.flags or not provided.flags or not provided.evr[1]:
        return True
    if provided.flags != "EQ":  # a ranged Provides: rare; rpm would intersect, kiln accepts
        return True
    return evr_compare(provided.evr, required.evr) in _HOLDS.get(required.flags, (0,))


@dataclass
class RpmIndex:
    by_name: dict[str, list[Rpm]] = field(default_factory=dict)
    providers: dict[str, list[tuple[Relation, Rpm]]] = field(default_factory=dict)
    by_file: dict[str, list[Rpm]] = field(default_factory=dict)

    def add(self, xml: bytes, base: str) -> None:
        for package in read_primary(xml, base):
            self.by_name.setdefault(package.name, []).append(package)
            for provided in package.provides:
                self.providers.setdefault(provided.name, []).append((provided, package))
            for path in package.files:
                self.by_file.setdefault(path, []).append(package)

    def merge(self, other: RpmIndex) -> None:
        """Another repository's packages beside these (one index per platform)."""
        for mine, theirs in ((self.by_name, other.by_name), (self.providers, other.providers),
                             (self.by_file, other.by_file)):  # fmt: skip
            for key, values in theirs.items():
                mine.setdefault(key, []).extend(values)  # type: ignore[arg-type]

    def meeting(self, required: Relation, arches: tuple[str, ...]) -> list[Rpm]:
        """The packages that meet a requirement, newest first."""
        found = [p for provided, p in self.providers.get(required.name, ())
                 if satisfies(provided, required)]  # fmt: skip
        found += [p for p in self.by_name.get(required.name, ())
                  if satisfies(Relation(p.name, "EQ", p.evr), required)]  # fmt: skip
        found += self.by_file.get(required.name, [])
        return _newest([p for p in found if p.arch in arches])


def _newest(packages: list[Rpm]) -> list[Rpm]:
    order = functools.cmp_to_key(lambda x, y: evr_compare(x.evr, y.evr))
    return sorted(set(packages), key=lambda p: (order(p), p.arch != "noarch"), reverse=True)


def _text(relation: Relation) -> str:
    if not relation.flags:
        return relation.name
    ops = {"EQ": "=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
    return f"{relation.name} {ops.get(relation.flags, relation.flags)} {evr_text(relation.evr)}"


def matches(package: Rpm, pin: str) -> bool:
    """A dnf-style version pin: V, V-R, E:V-R, with globs (24.05.8*)."""
    epoch, version, release = package.evr
    forms = (version, f"{version}-{release}", f"{epoch}:{version}-{release}")
    return any(fnmatch.fnmatchcase(form, pin) for form in forms)


@dataclass
class RpmResolution:
    packages: list[Rpm] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)


def resolve(index: RpmIndex, wanted: list[tuple[str, str]], arch: str) -> RpmResolution:
    """The newest match of each wanted (name, pin) and, transitively, a provider of each of its
    requirements, within these repositories (see the module)."""
    arches = (arch, "noarch")
    out = RpmResolution()
    chosen: dict[str, Rpm] = {}
    queue: list[Rpm] = []
    for name, pin in wanted:
        candidates = [p for p in index.by_name.get(name, []) if p.arch in arches]
        if not candidates:
            out.elsewhere.append(name)
            continue
        best = _newest([p for p in candidates if not pin or matches(p, pin)])
        if not best:
            have = ", ".join(sorted({p.version for p in candidates}))
            out.missing.append(f"rpm {name} {pin}: these repositories have {have}")
        elif name not in chosen:
            chosen[name] = best[0]
            queue.append(best[0])
    while queue:
        for required in queue.pop().requires:
            if required.name.startswith(_BUILTIN):
                continue
            if required.name.startswith("("):  # a rich dependency: dnf decides on the node
                out.elsewhere.append(required.name)
                continue
            meeting = index.meeting(required, arches)
            if any(chosen.get(p.name) == p for p in meeting):
                continue
            fresh = [p for p in meeting if p.name not in chosen]
            if fresh:
                chosen[fresh[0].name] = fresh[0]
                queue.append(fresh[0])
            elif meeting:  # only another version of a package already chosen would meet it
                held = ", ".join(f"{p.name} {chosen[p.name].version}" for p in meeting)
                out.missing.append(f"rpm requirement {_text(required)}: not met by {held}")
            else:
                out.elsewhere.append(required.name)
    out.packages = sorted(chosen.values(), key=lambda p: p.name)
    out.elsewhere = sorted(set(out.elsewhere))
    return out
