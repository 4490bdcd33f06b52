"""apt repositories for a bundle: each one's signed index read and checked, and the plan's
debs resolved there with their dependencies (kiln.artifacts.apt reads and resolves).

    index = read_repository(bundle, "https://deb.debian.org/debian", "bookworm main", "x86_64",
                            [Path("/usr/share/keyrings/debian-archive-keyring.gpg")])
    downloads = apt_packages(bundle, plan["artifacts"], "debian-12/x86_64", debs, failed)
"""

from __future__ import annotations

from pathlib import Path

from kiln.artifacts.apt import (
    AptIndexError,
    IndexFile,
    PackageIndex,
    installed_packages,
    read_release,
    resolve,
)
from kiln.artifacts.bundle import Bundle, Download, FetchError, index_bytes, sha256_of
from kiln.artifacts.signatures import role_keys, verify_signature
from kiln.mirror.layout import MirrorError

DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def read_repository(
    bundle: Bundle, url: str, suite: str, arch: str, keyrings: list[Path]
) -> PackageIndex:
    """A repository's signed index into the bundle, checked, and read (flat when suite is "/"
    or "./": its InRelease and Packages at the URL itself)."""
    name, *components = suite.split() or ["/"]
    base = url.rstrip("/")
    flat = name in ("/", "./")
    top = base if flat else f"{base}/dists/{name}"
    bundle.get(Download(f"{top}/InRelease", "", what=f"index of {url} {suite}"))
    inrelease = bundle.path_of(f"{top}/InRelease")
    verify_signature(inrelease, keyrings)
    try:
        listed = read_release(inrelease.read_text(encoding="utf-8", errors="replace"))
    except AptIndexError as exc:
        raise FetchError(f"{url} {suite}: {exc}") from None
    index = PackageIndex()
    for component in components if not flat else [""]:
        stem = "Packages" if flat else f"{component}/binary-{DEB_ARCH[arch]}/Packages"
        packages = _index_file(bundle, top, listed, stem, url, flat)
        if packages is None:
            raise FetchError(f"{url} {suite}: its Release lists no {stem} index")
        # apt's update is all or nothing per Release: a Translation it lists and cannot get
        # drops the whole repository, so the English descriptions come along where listed.
        if not flat:
            _index_file(bundle, top, listed, f"{component}/i18n/Translation-en", url, flat)
        try:
            index.add(index_bytes(packages).decode("utf-8", errors="replace"), base)
        except AptIndexError as exc:
            raise FetchError(str(exc)) from None
    return index


def _index_file(
    bundle: Bundle, top: str, listed: dict[str, IndexFile], stem: str, url: str, flat: bool
) -> Path | None:
    """One index file the Release lists (xz first, as apt asks), checked against its sha256,
    with its by-hash copy where apt asks by hash; None when the Release lists no such file."""
    choice = next((f"{stem}{ext}" for ext in (".xz", ".gz", "") if f"{stem}{ext}" in listed), None)
    if choice is None:
        return None
    entry = listed[choice]
    item = Download(f"{top}/{choice}", entry.sha256, entry.size, f"index {choice} of {url}")
    bundle.get(item)
    if not flat:  # apt asks for an index by its hash where the Release says Acquire-By-Hash
        by_hash = f"{top}/{choice.rsplit('/', 1)[0]}/by-hash/SHA256/{entry.sha256}"
        _copy_into(bundle, bundle.path_of(item.url), by_hash)
    return bundle.path_of(item.url)


def _copy_into(bundle: Bundle, source: Path, url: str) -> None:
    """`source`, in the bundle and checked already, copied to `url`'s path (apt's by-hash name):
    its recorded checksum serves the copy, which is written unless a whole one is there."""
    checked = bundle.files[str(source.relative_to(bundle.root))]
    target = bundle.path_of(url)
    if not target.is_file() or sha256_of(target) != checked["sha256"]:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    bundle.files[str(target.relative_to(bundle.root))] = {**checked, "url": url}


def apt_packages(
    bundle: Bundle, artifacts: list[dict], platform: str, debs: list[dict], failed: list[str]
) -> list[Download]:
    """The platform's repositories read and its debs resolved there: the packages to fetch."""
    arch = platform.split("/", 1)[1]
    keys_of = role_keys(artifacts, platform)
    index = PackageIndex()
    for repo in (a for a in artifacts if a["platform"] == platform and a["kind"] == "repository"):
        where = f"repository {repo['source']} {repo.get('suite', '')} ({platform})"
        try:
            if repo["checksum"].startswith("/"):  # the distribution's keyring, on this machine
                keyrings = [Path(repo["checksum"])]
            else:  # the key its role fetches, fetched first
                keys = keys_of.get(repo.get("role", ""), [])
                for key in keys:
                    bundle.get(key)
                keyrings = [bundle.path_of(k.url) for k in keys]
            part = read_repository(bundle, repo["source"], repo.get("suite", ""), arch, keyrings)
        except (FetchError, MirrorError) as exc:
            failed.append(f"{where}: {exc}")
            continue
        index.merge(part)
    wanted = [(a["name"], a.get("version", ""), a.get("recommends", True)) for a in debs]
    found = resolve(index, wanted, installed_packages(bundle.installed.get(platform, "")))
    bundle.packages[platform] = {p.name: p.version for p in found.packages}
    failed += [f"deb {why} ({platform})" for why in found.missing]
    return [Download(p.url, p.sha256, p.size, f"deb {p.name} {p.version}") for p in found.packages]
