"""Container images for a bundle: manifests and blobs, by digest, from a registry's API (the
OCI distribution API that Docker Hub, nvcr.io and a site's Harbor all speak).

    downloads = image_downloads(bundle, artifact)   # manifests fetched now; blobs to fetch

An image lies in the bundle where kiln mirror serve answers the same API: its manifests at
v2/<registry>/<repository>/manifests/<tag and digest>, its config and layers at
.../blobs/<digest>, so a node pulls mirror:8080/<registry>/<repository>:<tag> (for example
mirror:8080/nvcr.io/nvidia/pytorch:24.05-py3). Every manifest and blob is checked against
its digest; a pinned reference (@sha256:...) must be the manifest the registry answers. Of a
multi-architecture index, the manifests of the plan's architectures are kept. Pulls are
anonymous: a registry that answers 401 is asked for a bearer token for pull only (Docker
Hub's and NGC's public images).
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.request
from urllib.parse import urlencode, urlsplit

from kiln.artifacts.bundle import Bundle, Download, FetchError

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEXES = (OCI_INDEX, DOCKER_LIST)
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))
GOARCH = {"x86_64": "amd64", "aarch64": "arm64"}
TIMEOUT = 60.0


class _KeepNoCredentials(urllib.request.HTTPRedirectHandler):
    """A blob's redirect (to a CDN, with a signed URL) goes without the registry's token."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: PLR0913 - urllib's
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlsplit(newurl).netloc != urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


class Registry:
    """Anonymous reads from one registry's API at `base` (https://nvcr.io/v2)."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.token = ""
        self._opener = urllib.request.build_opener(_KeepNoCredentials)

    def open(self, url: str, accept: str = "") -> object:
        """The response to a GET, with a pull token asked for where the registry wants one
        (again when one has expired: a large layer outlasts Docker Hub's five minutes)."""
        try:
            return self._get(url, accept)
        except urllib.error.HTTPError as exc:
            challenge = exc.headers.get("WWW-Authenticate", "")
            if exc.code != 401 or not challenge.startswith("Bearer"):
                raise
            self.token = self._pull_token(challenge)
            return self._get(url, accept)

    def _get(self, url: str, accept: str) -> object:
        headers = {"Accept": accept} if accept else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return self._opener.open(urllib.request.Request(url, headers=headers), timeout=TIMEOUT)

    def _pull_token(self, challenge: str) -> str:
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        if "realm" not in fields:
            raise FetchError(f"{self.base}: a 401 without a token realm ({challenge})")
        query = {k: fields[k] for k in ("service", "scope") if k in fields}
        with self._opener.open(f"{fields['realm']}?{urlencode(query)}", timeout=TIMEOUT) as r:
            answer = json.loads(r.read())
        return str(answer.get("token") or answer.get("access_token") or "")


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _manifest(registry: Registry, url: str, expected: str, what: str) -> tuple[bytes, str]:
    """A manifest's bytes and media type, checked against `expected` (a digest) if given."""
    try:
        with registry.open(url, ACCEPT) as response:  # type: ignore[attr-defined]
            data = response.read()
            media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise FetchError(f"{what} ({url}): {getattr(exc, 'reason', None) or exc}") from None
    if expected and _digest(data) != expected:
        raise FetchError(f"{what} ({url}): manifest {_digest(data)} is not the {expected} named")
    return data, media_type or json.loads(data).get("mediaType", "")


def image_downloads(bundle: Bundle, artifact: dict) -> list[Download]:
    """One image line of the plan: its manifest (and index) fetched, checked and put in the
    bundle; its config and layers returned, to fetch by digest."""
    name, reference = artifact["name"], artifact["version"]
    host, _, repository = name.partition("/")
    source = artifact["source"]  # https://<registry>/v2/<repository>
    registry = Registry(source.rsplit(f"/{repository}", 1)[0])
    root = f"v2/{host.split(':')[0]}/{repository}"
    what = f"image {name}:{reference}" if ":" not in reference else f"image {name}@{reference}"
    data, media_type = _manifest(registry, f"{source}/manifests/{reference}",
                                 artifact.get("checksum", ""), what)  # fmt: skip
    bundle.put(f"{root}/manifests/{_digest(data)}", f"{source}/manifests/{reference}", data,
               media_type)  # fmt: skip
    if _digest(data) != reference:  # a tag: served by its name too
        bundle.put(f"{root}/manifests/{reference}", f"{source}/manifests/{reference}", data,
                   media_type)  # fmt: skip
    document = json.loads(data)
    if media_type in INDEXES:
        arch = GOARCH.get(artifact["platform"].rsplit("/", 1)[-1], "")
        chosen = [m for m in document.get("manifests", [])
                  if m.get("platform", {}).get("os") == "linux"
                  and m.get("platform", {}).get("architecture") == arch]  # fmt: skip
        if not chosen:
            raise FetchError(f"{what}: no linux/{arch} manifest in its index")
        digest = chosen[0]["digest"]
        data, media_type = _manifest(registry, f"{source}/manifests/{digest}", digest, what)
        bundle.put(f"{root}/manifests/{digest}", f"{source}/manifests/{digest}", data, media_type)
        document = json.loads(data)
    blobs = [document.get("config", {}), *document.get("layers", [])]
    return [
        Download(f"{source}/blobs/{b['digest']}", b["digest"].removeprefix("sha256:"),
                 int(b.get("size", 0)), f"{what} blob {b['digest'][:19]}",
                 path=f"{root}/blobs/{b['digest']}", opener=registry.open)
        for b in blobs if str(b.get("digest", "")).startswith("sha256:")
    ]  # fmt: skip
