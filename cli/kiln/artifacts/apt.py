"""An apt repository's index read, and the packages a node needs from it resolved with their
dependencies: what `kiln mirror fetch` downloads for the deb artifacts of a plan.

    release = read_release(inrelease_text)           # suites' index files and their sha256
    index = PackageIndex.parse(packages_text, base_url)
    found = resolve(index, [("chrony", ""), ("slurmd", "24.11.5*")])
    found.packages  # [Package(name="chrony", version="4.3-2+deb12u1", url=..., sha256=...), ...]
    found.missing   # ["slurmd 24.11.5*: no such version (offered: 22.05.8-4+deb12u3)"]

A package is chosen as apt would with no pins: the newest version that matches (an exact
version, or a glob such as 24.11.5*, the form kiln's roles pin with). Its Depends and
Pre-Depends are followed: for each group of alternatives the first one the index can satisfy,
by name or by Provides, within its version constraint; Recommends too, as apt installs them
by default (the roles keep apt's default), where the index has them (apt skips one it cannot
find, so a missing one is no failure). The whole closure is kept, the base
system's libraries too: a package may need a newer libc6 than the node has, and apt then asks
the mirror for it (Debian 13 marks even libc6 Priority: optional, so no field says "on every
node"). Pure: text in, records out; fetching is kiln.artifacts.fetch's.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from kiln.artifacts.debversion import compare, sort_key

_RELATION = re.compile(r"^\s*([^\s(:]+)(?::\S+)?\s*(?:\(\s*(<<|<=|=|>=|>>)\s*([^)\s]+)\s*\))?")


class AptIndexError(ValueError):
    """An index that is not what apt would accept (its words name the line or file)."""


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    architecture: str
    url: str  # where the .deb is: the repository's base URL + Filename
    sha256: str
    size: int
    depends: tuple[tuple[tuple[str, str, str], ...], ...] = ()  # groups of (name, op, version)
    recommends: tuple[tuple[tuple[str, str, str], ...], ...] = ()
    provides: tuple[tuple[str, str], ...] = ()  # (name, version: "" when unversioned)


def stanzas(text: str) -> Iterable[dict[str, str]]:
    """The paragraphs of a deb822 control file (Packages, Release): field -> value, with
    continuation lines joined by newlines."""
    fields: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields, last = {}, None
        elif line[0] in " \t" and last is not None:
            fields[last] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
            last = key
    if fields:
        yield fields


def _package(s: dict[str, str], url: str, sha256: str, size: int) -> Package:
    """One stanza (of a Packages index or a dpkg status file) as a Package; KeyError when it
    has no Package or Version."""
    return Package(
        name=s["Package"], version=s["Version"], architecture=s.get("Architecture", ""),
        url=url, sha256=sha256, size=size,
        depends=_relations(", ".join(s[k] for k in ("Pre-Depends", "Depends") if k in s)),
        recommends=_relations(s.get("Recommends", "")),
        provides=tuple((r[0], r[2] if r[1] == "=" else "")
                       for g in _relations(s.get("Provides", "")) for r in g),
    )  # fmt: skip


def installed_packages(status_text: str) -> list[Package]:
    """A node's installed packages, from its dpkg status file (/var/lib/dpkg/status): what
    apt finds there already (no URL: nothing to fetch)."""
    return [_package(s, "", "", 0) for s in stanzas(status_text)
            if s.get("Status", "").endswith(" installed") and "Package" in s
            and "Version" in s]  # fmt: skip


def _relations(text: str) -> tuple[tuple[tuple[str, str, str], ...], ...]:
    groups = []
    for group in text.split(","):
        if not group.strip():
            continue
        alternatives = []
        for alternative in group.split("|"):
            match = _RELATION.match(alternative)
            if match:
                alternatives.append((match[1], match[2] or "", match[3] or ""))
        groups.append(tuple(alternatives))
    return tuple(groups)


@dataclass
class PackageIndex:
    by_name: dict[str, list[Package]] = field(default_factory=dict)
    providers: dict[str, list[Package]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, base_url: str) -> PackageIndex:
        index = cls()
        index.add(text, base_url)
        return index

    def add(self, text: str, base_url: str) -> None:
        """The stanzas of one Packages file; `base_url` is what its Filename fields are under."""
        base = base_url.rstrip("/") + "/"
        for s in stanzas(text):
            try:
                package = _package(s, base + s["Filename"].lstrip("./"), s["SHA256"],
                                   int(s.get("Size", "0")))  # fmt: skip
            except KeyError as missing:
                raise AptIndexError(
                    f"{base_url}: package {s.get('Package', '?')} has no {missing} field"
                ) from None
            self.by_name.setdefault(package.name, []).append(package)
            for name, _ in package.provides:
                self.providers.setdefault(name, []).append(package)

    def merge(self, other: PackageIndex) -> None:
        """Another repository's packages beside these (one index per platform)."""
        for mine, theirs in ((self.by_name, other.by_name), (self.providers, other.providers)):
            for name, packages in theirs.items():
                mine.setdefault(name, []).extend(packages)

    def newest(self, name: str, pattern: str = "") -> Package | None:
        """The newest version of `name` matching `pattern` (exact, or a glob); None if none."""
        offered = [
            p for p in self.by_name.get(name, ())
            if not pattern or p.version == pattern or fnmatch.fnmatchcase(p.version, pattern)
        ]  # fmt: skip
        return max(offered, key=lambda p: sort_key(p.version)) if offered else None

    def satisfying(self, name: str, op: str, version: str) -> Package | None:
        """The newest package that satisfies one relation, by its own name or a Provides (a
        versioned relation only by a Provides of that name with a version: `foo (= 9729)`)."""
        candidates = [p for p in self.by_name.get(name, ()) if _meets(p.version, op, version)]
        if not candidates:
            candidates = [
                p for p in self.providers.get(name, ()) if _provides(p, name, op, version)
            ]
        return max(candidates, key=lambda p: sort_key(p.version)) if candidates else None


def _meets(have: str, op: str, want: str) -> bool:
    if not op:
        return True
    result = compare(have, want)
    return {"<<": result < 0, "<=": result <= 0, "=": result == 0, ">=": result >= 0,
            ">>": result > 0}[op]  # fmt: skip


@dataclass
class Resolution:
    packages: list[Package] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # "what: why", for the operator


def resolve(
    index: PackageIndex,
    wanted: Iterable[tuple[str, str] | tuple[str, str, bool]],
    installed: Iterable[Package] = (),
) -> Resolution:
    """The packages `wanted` ((name, version or glob or "", and whether its Recommends come
    along: True unless said) and everything they depend on, chosen in apt's order: a
    package's relations one after another (Depends, then Recommends), each unmet one marking
    a package and following that package's relations at once, so a later relation sees what
    an earlier one brought in (libtorch2.6's "libopenblas0 | ... | libblas3" is met by the
    libblas3 its Depends marked). A package's Recommends are followed where some task that
    brings it in installs Recommends (apt's default); apt itself skips the Recommends of a
    package an earlier task installed without them, so this holds a little more than such an
    order installs, never less.

    `installed` (a node's, installed_packages) is what apt finds on the node: a
    wanted package installed at a version its pin allows is left as it is (the apt module's
    state=present), a relation an installed package meets takes nothing, and an installed
    package's Recommends are not followed (apt adds none to a package already there). Without
    it the closure is resolved as on an empty system, a superset of what any node fetches."""
    out = Resolution()
    chosen: dict[str, Package] = {p.name: p for p in installed}
    followed: dict[str, bool] = dict.fromkeys(chosen, True)  # name -> Recommends followed

    def install(package: Package, recommends: bool) -> None:
        current = chosen.get(package.name)
        if current is not None and not current.url and package.url:  # an upgrade apt fetches
            del chosen[package.name], followed[package.name]
        if package.name in followed and (followed[package.name] or not recommends):
            return
        package = chosen.setdefault(package.name, package)
        followed[package.name] = recommends
        groups = [(g, True) for g in package.depends]
        groups += [(g, False) for g in package.recommends] if recommends else []
        for group, needed in groups:
            present = next((p for r in group if (p := _chosen_for(chosen, r)) is not None), None)
            if present is not None:  # followed again only to take its Recommends now
                if recommends and not followed.get(present.name, False):
                    install(present, True)
                continue
            found = next((p for r in group if (p := index.satisfying(*r)) is not None), None)
            if found is None and not needed:  # a Recommends apt cannot find: it goes on
                continue
            if found is None:
                wants = " | ".join(f"{n} ({op} {v})" if op else n for n, op, v in group)
                out.missing.append(f"{wants}: needed by {package.name}, in no repository")
            else:
                install(found, recommends)

    for name, pattern, *flags in wanted:
        have = chosen.get(name)
        if (
            have is not None
            and not have.url
            and (not pattern or fnmatch.fnmatchcase(have.version, pattern))
        ):
            continue  # on the node already, at a version the pin allows
        package = index.newest(name, pattern)
        if package is None:
            offered = sorted((p.version for p in index.by_name.get(name, ())), key=sort_key)
            why = f"offered: {', '.join(offered)}" if offered else "in no repository of the plan"
            out.missing.append(f"{name} {pattern or '(any version)'}: {why}")
            continue
        install(package, flags[0] if flags else True)
    fetched = [p for p in chosen.values() if p.url]
    out.packages = sorted(fetched, key=lambda p: (p.name, sort_key(p.version)))
    return out


def _chosen_for(chosen: dict[str, Package], relation: tuple[str, str, str]) -> Package | None:
    """The package already chosen that meets `relation` (by name or a Provides), if any."""
    name, op, version = relation
    have = chosen.get(name)
    if have is not None and _meets(have.version, op, version):
        return have
    return next((p for p in chosen.values() if _provides(p, name, op, version)), None)


def _provides(package: Package, name: str, op: str, version: str) -> bool:
    """Whether `package` provides `name` within (op, version), as dpkg reads Provides."""
    return any(
        provided == name and (not op or (given and _meets(given, op, version)))
        for provided, given in package.provides
    )


@dataclass(frozen=True)
class IndexFile:
    path: str  # relative to the suite's directory: main/binary-amd64/Packages.xz
    sha256: str
    size: int


def read_release(text: str) -> dict[str, IndexFile]:
    """The SHA256 list of a Release or InRelease file (its signature is gpgv's to check)."""
    body = text
    if text.startswith("-----BEGIN PGP SIGNED MESSAGE-----"):
        body = text.split("\n\n", 1)[1].split("-----BEGIN PGP SIGNATURE-----", 1)[0]
    for fields in stanzas(body):
        if "SHA256" in fields:
            files = {}
            for line in fields["SHA256"].splitlines():
                parts = line.split()
                if len(parts) == 3:
                    files[parts[2]] = IndexFile(parts[2], parts[0], int(parts[1]))
            return files
    raise AptIndexError("the Release file has no SHA256 list")
