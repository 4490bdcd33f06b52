"""`kiln mirror fetch`: a plan's artifacts downloaded into a bundle a mirror serves as it is.

    outcome = fetch_bundle(plan_document, Path("bundle"), progress)
    outcome.fetched, outcome.kept, outcome.failed     # failed: "what (from where): why"

The bundle holds every file at its source's host and path (kiln.mirror.layout), the bytes the
source published, so a mirror serving the bundle's folder is the upstream layout under one
root, and the signed indexes are the publishers' own: nodes trust the mirror with the keys they
already trust. For each OS release in the plan, every apt repository (the distribution's
archive and the roles' repositories) is read: its InRelease checked with gpgv against its
keyring (the distribution's, or the key the plan fetches for that role), its Packages index
checked against the InRelease's SHA256; the plan's deb packages are resolved there with their
dependencies (kiln.artifacts.apt) and fetched with the index's sha256. Files are checked
against the plan's sha256 where it has one. Python wheels are resolved by pip for each
release's interpreter and fetched with their index's sha256, and the bundle gets the simple
index pages the nodes' pip reads (kiln.artifacts.wheels).

Every download goes to a `.part` file and is renamed into place only once its checksum held,
so the bundle holds only whole, checked files whatever stops the run; `bundle.json` lists
them, and the exact version each platform's packages resolved to (the plan's unpinned lines
made exact: what the nodes will install). Run again, it fetches only what is missing. What
cannot be fetched (an unreachable source, a checksum that does not hold, a package no
repository offers, a kind kiln does not fetch yet) is named with its source, and the rest is
still fetched.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kiln.artifacts import wheels
from kiln.artifacts.apt import AptIndexError, IndexFile, PackageIndex, read_release, resolve
from kiln.mirror.layout import MANIFEST, MirrorError, mirror_path

TIMEOUT = 60.0
CHUNK = 1 << 20
DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
# What the bundle does not fetch yet, by kind, and why (said for each such artifact).
NOT_YET = {
    "rpm": "kiln mirror fetch reads apt repositories only (dnf repositories: not yet)",
}


class FetchError(Exception):
    """One thing that could not be fetched; its text names what and where from."""


@dataclass(frozen=True)
class Download:
    url: str
    sha256: str  # "" when the source publishes none (checked by what uses it: a key by gpgv)
    size: int = 0
    what: str = ""  # the artifact it is for, as the operator reads it
    path: str = ""  # its place in the bundle when not its URL's (a wheel: the decoded name)


@dataclass
class FetchOutcome:
    fetched: list[str] = field(default_factory=list)  # bundle paths downloaded now
    kept: list[str] = field(default_factory=list)  # already there and whole
    failed: list[str] = field(default_factory=list)
    bytes: int = 0


# (done, total, bytes of the current file done, its size, what): what a progress bar shows
Progress = Callable[[int, int, int, int, str], None]
Opener = Callable[[str], object]  # url -> a readable response (urllib.request.urlopen's)


def _open(url: str) -> object:
    return urllib.request.urlopen(url, timeout=TIMEOUT)  # noqa: S310 - http(s) from the plan


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Bundle:
    root: Path
    opener: Opener = _open
    files: dict[str, dict] = field(default_factory=dict)  # path -> {url, sha256, size}
    # platform -> package -> the exact version resolved: what the plan's unpinned lines became
    packages: dict[str, dict[str, str]] = field(default_factory=dict)
    wheel_versions: dict[str, dict[str, str]] = field(default_factory=dict)  # the same, wheels
    indexes: dict[str, set[wheels.Wheel]] = field(default_factory=dict)  # pip index -> wheels

    def path_of(self, url: str) -> Path:
        return self.root / mirror_path(url)

    def get(self, item: Download, on_bytes: Callable[[int, int], None] | None = None) -> bool:
        """The file in place and checked; True when it was downloaded now, False when a whole
        copy was already there. FetchError naming the file and its source if not."""
        target = self.root / item.path if item.path else self.path_of(item.url)
        relative = str(target.relative_to(self.root))
        have = sha256_of(target) if target.is_file() else None  # read once, kept or not
        if have is not None and (not item.sha256 or have == item.sha256):
            self.files[relative] = {"url": item.url, "sha256": have,
                                    "size": target.stat().st_size}  # fmt: skip
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        digest, done = hashlib.sha256(), 0
        try:
            with self.opener(item.url) as response, part.open("wb") as out:  # type: ignore[attr-defined]
                for block in iter(lambda: response.read(CHUNK), b""):
                    out.write(block)
                    digest.update(block)
                    done += len(block)
                    if on_bytes:
                        on_bytes(done, item.size)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            part.unlink(missing_ok=True)
            why = getattr(exc, "reason", None) or exc
            raise FetchError(f"{item.what or relative} ({item.url}): {why}") from None
        if item.sha256 and digest.hexdigest() != item.sha256:
            part.unlink(missing_ok=True)
            raise FetchError(
                f"{item.what or relative} ({item.url}): sha256 {digest.hexdigest()} is not "
                f"the {item.sha256} its source publishes"
            )
        part.replace(target)
        self.files[relative] = {"url": item.url, "sha256": digest.hexdigest(), "size": done}
        return True

    def write_manifest(self, plan: dict, failed: list[str], complete: bool) -> None:
        """bundle.json, replaced whole: the files the bundle holds, checked, and what failed."""
        document = {
            "kiln": "mirror-bundle", "schema_version": 1, "cluster": plan.get("cluster"),
            "platforms": plan.get("platforms", []),
            "complete": complete, "failed": failed,
            "packages": {k: dict(sorted(v.items())) for k, v in sorted(self.packages.items())},
            "wheels": {k: dict(sorted(v.items())) for k, v in sorted(self.wheel_versions.items())},
            "files": dict(sorted(self.files.items())),
        }  # fmt: skip
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".bundle-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2)
            out.write("\n")
        os.replace(tmp, self.root / MANIFEST)


def _text(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".xz":
        data = lzma.decompress(data)
    elif path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def verify_signature(inrelease: Path, keyrings: list[Path]) -> None:
    """gpgv over an InRelease with these keyrings (armored keys too); FetchError when it does
    not verify or there is nothing to verify it with."""
    missing = [str(k) for k in keyrings if not k.is_file()]
    if missing or not keyrings:
        raise FetchError(
            f"{inrelease.name}: no keyring to check it with ({', '.join(missing) or 'none'}: "
            "install the distribution's keyring package, or let the plan fetch the role's key)"
        )
    with tempfile.TemporaryDirectory(prefix="kiln-gpgv-") as tmp:
        argv = ["gpgv"]
        for number, keyring in enumerate(keyrings):
            if keyring.read_bytes()[:5] == b"-----":  # armored: gpgv reads binary keyrings only
                binary = Path(tmp) / f"key{number}.gpg"
                _run(["gpg", "--batch", "--yes", "--dearmor", "-o", str(binary), str(keyring)], tmp)
                keyring = binary
            argv += ["--keyring", str(keyring)]
        result = _run([*argv, str(inrelease)], tmp, check=False)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        raise FetchError(
            f"{inrelease}: its signature does not verify ({lines[-1] if lines else ''})"
        )


def _run(argv: list[str], home: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "GNUPGHOME": home}  # a throwaway home: no user's keys are read
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                                env=env)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FetchError(f"{argv[0]} could not run: {exc}") from None
    if check and result.returncode != 0:
        raise FetchError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result


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
            index.add(_text(packages), base)
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


def plan_downloads(bundle: Bundle, plan: dict, failed: list[str]) -> list[Download]:
    """Every file the plan names, its repositories read and its packages resolved: the list to
    download (what cannot be resolved goes to `failed`, named)."""
    artifacts = plan.get("artifacts", [])
    downloads: list[Download] = []
    for a in artifacts:
        if a.get("unresolved"):
            failed.append(f"{a['kind']} {a['name']} ({a['platform']}, {a['where']}): "
                          f"unresolved: {a['unresolved']}")  # fmt: skip
        elif a["kind"] in ("file", "key"):
            checksum = a.get("checksum", "")
            sha = checksum.split(":", 1)[1] if checksum.startswith("sha256:") else ""
            downloads.append(Download(a["source"], sha, what=f"{a['kind']} {a['name']}"))
        elif a["kind"] in NOT_YET:
            failed.append(f"{a['kind']} {a['name']} {a.get('version') or ''} "
                          f"({a['platform']}): {NOT_YET[a['kind']]}")  # fmt: skip
    for platform in sorted({a["platform"] for a in artifacts}):
        debs = [a for a in artifacts if a["platform"] == platform and a["kind"] == "deb"
                and not a.get("unresolved")]  # fmt: skip
        if debs:
            downloads += _packages(bundle, artifacts, platform, debs, failed)
    for (platform, index), wanted in wheels.requirements(artifacts).items():
        try:
            found = wheels.resolve_for(platform, index, wanted)
        except wheels.WheelError as exc:
            failed.append(f"wheel {' '.join(wanted)} ({platform}, {index}): {exc}")
            continue
        bundle.wheel_versions.setdefault(platform, {}).update({w.project: w.version for w in found})
        bundle.indexes.setdefault(index, set()).update(found)
        downloads += [Download(w.url, w.sha256, what=f"wheel {w.project} {w.version}",
                               path=wheels.bundle_path(w.url)) for w in found]  # fmt: skip
    return downloads


def write_index_pages(bundle: Bundle) -> None:
    """Each pip index's pages, listing the wheels the bundle holds whole (a page is rewritten
    on every run: it lists what this run left in place)."""
    for index, found in sorted(bundle.indexes.items()):
        whole = [w for w in found if wheels.bundle_path(w.url) in bundle.files]
        for path, page in wheels.index_pages(index, whole).items():
            data = page.encode("utf-8")
            target = bundle.root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            url = f"{index.rstrip('/')}/{Path(path).parent.name}/"
            digest = hashlib.sha256(data).hexdigest()
            bundle.files[path] = {"url": url, "sha256": digest, "size": len(data)}


KEY_SUFFIXES = (".pub", ".asc", ".gpg", ".key")


def _role_keys(artifacts: list[dict], platform: str) -> dict[str, list[Download]]:
    """The keys each role fetches for this platform (a key, or a file named as a key is):
    what that role's repository is checked with."""
    keys: dict[str, list[Download]] = {}
    for a in artifacts:
        if a["platform"] == platform and (
            a["kind"] == "key" or (a["kind"] == "file" and a["name"].endswith(KEY_SUFFIXES))
        ):
            keys.setdefault(a.get("role", ""), []).append(
                Download(a["source"], "", what=f"key {a['name']}")
            )
    return keys


def _packages(
    bundle: Bundle, artifacts: list[dict], platform: str, debs: list[dict], failed: list[str]
) -> list[Download]:
    """The platform's repositories read and its debs resolved there: the packages to fetch."""
    arch = platform.split("/", 1)[1]
    role_keys = _role_keys(artifacts, platform)
    index = PackageIndex()
    for repo in (a for a in artifacts if a["platform"] == platform and a["kind"] == "repository"):
        where = f"repository {repo['source']} {repo.get('suite', '')} ({platform})"
        try:
            if repo["checksum"].startswith("/"):  # the distribution's keyring, on this machine
                keyrings = [Path(repo["checksum"])]
            else:  # the key its role fetches, fetched first
                keys = role_keys.get(repo.get("role", ""), [])
                for key in keys:
                    bundle.get(key)
                keyrings = [bundle.path_of(k.url) for k in keys]
            part = read_repository(bundle, repo["source"], repo.get("suite", ""), arch, keyrings)
        except (FetchError, MirrorError) as exc:
            failed.append(f"{where}: {exc}")
            continue
        for name, packages in part.by_name.items():
            index.by_name.setdefault(name, []).extend(packages)
        for name, packages in part.providers.items():
            index.providers.setdefault(name, []).extend(packages)
    found = resolve(index, [(a["name"], a.get("version", "")) for a in debs])
    bundle.packages[platform] = {p.name: p.version for p in found.packages}
    failed += [f"deb {why} ({platform})" for why in found.missing]
    return [Download(p.url, p.sha256, p.size, f"deb {p.name} {p.version}") for p in found.packages]


def fetch_bundle(plan: dict, root: Path, progress: Progress | None = None,
                 opener: Opener = _open) -> FetchOutcome:  # fmt: skip
    """Everything the plan names into the bundle at `root` (made if missing); see the module."""
    root.mkdir(parents=True, exist_ok=True)
    bundle = Bundle(root, opener)
    outcome = FetchOutcome()
    finished = False
    try:
        downloads = plan_downloads(bundle, plan, outcome.failed)
        unique = list({d.url: d for d in downloads}.values())
        for number, item in enumerate(unique, 1):

            def on_bytes(done: int, size: int, item: Download = item, number: int = number):
                if progress:
                    progress(number - 1, len(unique), done, size, item.what)

            try:
                now = bundle.get(item, on_bytes)
            except (FetchError, MirrorError) as exc:
                outcome.failed.append(str(exc))
                continue
            relative = item.path or str(bundle.path_of(item.url).relative_to(root))
            (outcome.fetched if now else outcome.kept).append(relative)
            outcome.bytes += bundle.files[relative]["size"] if now else 0
            if progress:
                progress(number, len(unique), item.size, item.size, item.what)
        write_index_pages(bundle)
        finished = True
    finally:  # whatever stopped it, the manifest lists exactly the whole files
        bundle.write_manifest(plan, outcome.failed, complete=finished and not outcome.failed)
    return outcome
