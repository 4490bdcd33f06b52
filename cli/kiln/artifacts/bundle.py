"""A bundle being built: files downloaded into their place, each checked, and the manifest.

    bundle = Bundle(Path("bundle"))
    bundle.get(Download(url, sha256, size, "deb chrony 4.3-2"))   # True: downloaded now
    bundle.write_manifest(plan, failed, complete=True)             # bundle.json

Every file lands at its source's host and path (kiln.mirror.layout) through a `.part` that is
renamed into place only once its checksum held, so the bundle holds only whole, checked files
whatever stops the run; `bundle.json` lists exactly those.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kiln.artifacts import wheels
from kiln.mirror.layout import MANIFEST, mirror_path

TIMEOUT = 60.0
CHUNK = 1 << 20


class FetchError(Exception):
    """One thing that could not be fetched; its text names what and where from."""


class NotPublished(FetchError):
    """The source answered that it has no such file (HTTP 404)."""


@dataclass(frozen=True)
class Download:
    url: str
    sha256: str  # "" when the source publishes none (checked by what uses it: a key by gpgv)
    size: int = 0
    what: str = ""  # the artifact it is for, as the operator reads it
    path: str = ""  # its place in the bundle when not its URL's (a wheel: the decoded name)
    # a check of the downloaded file before it is put in place (an rpm's signature)
    check: Callable[[Path], None] | None = field(default=None, compare=False)
    # how to open its URL when not plainly (a registry's blob, with its pull token)
    opener: Callable[[str], object] | None = field(default=None, compare=False)


@dataclass
class FetchOutcome:
    fetched: list[str] = field(default_factory=list)  # bundle paths downloaded now
    kept: list[str] = field(default_factory=list)  # already there and whole
    failed: list[str] = field(default_factory=list)
    bytes: int = 0
    # platform -> what is left to the node's own repositories (Bundle.elsewhere)
    elsewhere: dict[str, list[str]] = field(default_factory=dict)


# (done, total, bytes of the current file done, its size, what): what a progress bar shows
Progress = Callable[[int, int, int, int, str], None]
Opener = Callable[[str], object]  # url -> a readable response (urllib.request.urlopen's)


def open_url(url: str) -> object:
    return urllib.request.urlopen(url, timeout=TIMEOUT)  # noqa: S310 - http(s) from the plan


# How an index file is compressed, by its suffix (apt's Packages, dnf's repodata)
_DECOMPRESS = {".gz": gzip.decompress, ".xz": lzma.decompress, ".bz2": bz2.decompress}


def index_bytes(path: Path) -> bytes:
    """An index file in the bundle, decompressed as its suffix says."""
    data = path.read_bytes()
    if path.suffix == ".zst":
        raise FetchError(f"{path.name}: zstd-compressed, which this Python cannot read")
    decompress = _DECOMPRESS.get(path.suffix)
    return decompress(data) if decompress else data


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Bundle:
    root: Path
    opener: Opener = open_url
    files: dict[str, dict] = field(default_factory=dict)  # path -> {url, sha256, size}
    # platform -> package -> the exact version resolved: what the plan's unpinned lines became
    packages: dict[str, dict[str, str]] = field(default_factory=dict)
    wheel_versions: dict[str, dict[str, str]] = field(default_factory=dict)  # the same, wheels
    # platform -> a node's dpkg status: what the nodes have already (kiln mirror fetch
    # --installed), left out of the closure
    installed: dict[str, str] = field(default_factory=dict)
    # platform -> what no repository of the plan offers: the node's own repositories' (dnf)
    elsewhere: dict[str, list[str]] = field(default_factory=dict)
    indexes: dict[str, set[wheels.Wheel]] = field(default_factory=dict)  # pip index -> wheels

    def path_of(self, url: str) -> Path:
        return self.root / mirror_path(url)

    def place(self, item: Download) -> str:
        """Where `item` lies in the bundle, relative to its root."""
        return item.path or mirror_path(item.url)

    def get(self, item: Download, on_bytes: Callable[[int, int], None] | None = None) -> bool:
        """The file in place and checked; True when it was downloaded now, False when a whole
        copy was already there. FetchError naming the file and its source if not."""
        relative = self.place(item)
        target = self.root / relative
        have = sha256_of(target) if target.is_file() else None  # read once, kept or not
        if have is not None and (not item.sha256 or have == item.sha256):
            self.files[relative] = {"url": item.url, "sha256": have,
                                    "size": target.stat().st_size}  # fmt: skip
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        digest, done = hashlib.sha256(), 0
        try:
            opener = item.opener or self.opener
            with opener(item.url) as response, part.open("wb") as out:  # type: ignore[attr-defined]
                for block in iter(lambda: response.read(CHUNK), b""):
                    out.write(block)
                    digest.update(block)
                    done += len(block)
                    if on_bytes:
                        on_bytes(done, item.size)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            part.unlink(missing_ok=True)
            why = getattr(exc, "reason", None) or exc
            error = NotPublished if getattr(exc, "code", None) == 404 else FetchError
            raise error(f"{item.what or relative} ({item.url}): {why}") from None
        if item.sha256 and digest.hexdigest() != item.sha256:
            part.unlink(missing_ok=True)
            raise FetchError(
                f"{item.what or relative} ({item.url}): sha256 {digest.hexdigest()} is not "
                f"the {item.sha256} its source publishes"
            )
        try:
            if item.check:
                item.check(part)
        except FetchError as exc:
            part.unlink(missing_ok=True)
            raise FetchError(f"{item.what or relative} ({item.url}): {exc}") from None
        part.replace(target)
        self.files[relative] = {"url": item.url, "sha256": digest.hexdigest(), "size": done}
        return True

    def put(self, relative: str, url: str, data: bytes, media_type: str = "") -> None:
        """Bytes already fetched and checked (an image's manifest) into the bundle, whole:
        written beside and renamed into place."""
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        part.write_bytes(data)
        part.replace(target)
        entry = {"url": url, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        self.files[relative] = {**entry, "media_type": media_type} if media_type else entry

    def write_manifest(self, plan: dict, failed: list[str], complete: bool) -> None:
        """bundle.json, replaced whole: the files the bundle holds, checked, and what failed."""
        document = {
            "kiln": "mirror-bundle", "schema_version": 1, "cluster": plan.get("cluster"),
            "platforms": plan.get("platforms", []),
            "complete": complete, "failed": failed,
            "packages": {k: dict(sorted(v.items())) for k, v in sorted(self.packages.items())},
            "wheels": {k: dict(sorted(v.items())) for k, v in sorted(self.wheel_versions.items())},
            "from_node_repositories": dict(sorted(self.elsewhere.items())),
            "installed_baseline": {  # the dpkg status each platform was resolved against
                platform: hashlib.sha256(text.encode()).hexdigest()
                for platform, text in sorted(self.installed.items())
            },
            "files": dict(sorted(self.files.items())),
        }  # fmt: skip
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".bundle-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2)
            out.write("\n")
        os.replace(tmp, self.root / MANIFEST)
