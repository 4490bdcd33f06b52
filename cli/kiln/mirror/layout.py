"""Where an artifact lives in a kiln mirror: under the mirror's root, at its source's host and
path (https://github.com/NVIDIA/nccl-tests/archive/v2.13.6.tar.gz is
<root>/github.com/NVIDIA/nccl-tests/archive/v2.13.6.tar.gz), the layout apt-mirror and most
site mirrors use. One rule for every kind, so the roles, `kiln mirror plan` and a mirror built
from its bundle agree on every path without a table between them.

    mirrored("https://download.example/a/b.deb", "http://mirror:8080/kiln")
        -> "http://mirror:8080/kiln/download.example/a/b.deb"
    mirror_path("https://download.example/a/b.deb") -> "download.example/a/b.deb"
"""

from __future__ import annotations

from urllib.parse import urlsplit

# A bundle's manifest, at its root: the files it holds whole (kiln mirror fetch writes it, kiln
# mirror serve serves only what it lists).
MANIFEST = "bundle.json"


class MirrorError(ValueError):
    """A source kiln cannot place in a mirror (not an http(s) URL)."""


def mirror_path(url: str) -> str:
    """The path of a source's copy under a mirror's root: its host, then its path."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MirrorError(f"{url!r} is not an http(s) URL a mirror can hold")
    path = parts.path.lstrip("/")
    return f"{parts.hostname}/{path}" if path else parts.hostname


def mirrored(url: str, root: str | None) -> str:
    """`url` as fetched from the mirror at `root`; `url` itself when there is no mirror."""
    if not root:
        return url
    return f"{root.rstrip('/')}/{mirror_path(url)}"


def in_mirror(url: str, root: str) -> bool:
    """Whether `url` is served by the mirror at `root` (what offline mode allows)."""
    base = root.rstrip("/") + "/"
    return url.startswith(base)
