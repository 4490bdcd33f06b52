"""kiln mirror for container images, against a registry that behaves as Docker Hub's and NGC's
do (issue 30): a pull token asked for on a 401, a multi-architecture index, blobs redirected
to another host that refuses the registry's credentials. The registry here is a small HTTP
server speaking that part of the OCI distribution API; tests/integration/test_mirror_images.py
runs the real one with Docker.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.request
from dataclasses import asdict

import pytest

from bundle_server import serving
from kiln.artifacts.fetch import fetch_bundle
from kiln.artifacts.oci import OCI_INDEX, OCI_MANIFEST
from kiln.artifacts.plan import images
from kiln.inventory.mirror_spec import MirrorSpec

TOKEN = "pull-only"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _image(arch: str) -> tuple[bytes, dict[str, bytes]]:
    layer, config = f"layer {arch}".encode(), json.dumps({"architecture": arch}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"digest": _digest(config), "size": len(config)},
        "layers": [{"digest": _digest(layer), "size": len(layer)}],
    }).encode()  # fmt: skip
    return manifest, {_digest(layer): layer, _digest(config): config}


class _Registry(http.server.BaseHTTPRequestHandler):
    """/v2/kiln/multi: an index of amd64 and arm64 behind a bearer token; blobs redirect to
    the other loopback name (a CDN), which refuses any Authorization header."""

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        return

    def _answer(self, code: int, body: bytes = b"", media_type: str = "", **headers: str):
        self.send_response(code)
        if media_type:
            self.send_header("Content-Type", media_type)
        for key, value in headers.items():
            self.send_header(key.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 - the base class's name
        site = self.server.site
        path = self.path.split("?")[0]
        if path == "/token":
            return self._answer(200, json.dumps({"token": TOKEN}).encode(), "application/json")
        if path.startswith("/cdn/"):
            if "Authorization" in self.headers:  # as S3 refuses a second credential
                return self._answer(400, b"two credentials")
            return self._answer(200, site["blobs"][path.removeprefix("/cdn/")])
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            realm = f'Bearer realm="{site["url"]}/token",service="test",scope="pull"'
            return self._answer(401, b"", WWW_Authenticate=realm)
        name, _, reference = path.removeprefix("/v2/kiln/multi/").partition("/")
        if name == "manifests" and reference in site["manifests"]:
            data, media_type = site["manifests"][reference]
            return self._answer(200, data, media_type)
        if name == "blobs" and reference in site["blobs"]:
            cdn = site["url"].replace("127.0.0.1", "localhost")
            return self._answer(307, Location=f"{cdn}/cdn/{reference}")
        return self._answer(404)


@pytest.fixture
def registry():
    manifests, blobs = {}, {}
    entries = []
    for arch in ("amd64", "arm64"):
        manifest, parts = _image(arch)
        manifests[_digest(manifest)] = (manifest, OCI_MANIFEST)
        blobs |= parts
        entries.append({"mediaType": OCI_MANIFEST, "digest": _digest(manifest),
                        "size": len(manifest), "platform": {"os": "linux",
                                                            "architecture": arch}})  # fmt: skip
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries})
    manifests["1"] = manifests[_digest(index.encode())] = (index.encode(), OCI_INDEX)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.site = {"url": url, "manifests": manifests, "blobs": blobs}
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1], httpd.site
    httpd.shutdown()


def plan_of(reference: str, *platforms: str) -> dict:
    lines = images([reference], list(platforms))
    return {"cluster": "t", "platforms": list(platforms), "artifacts": [asdict(a) for a in lines]}


def test_the_plan_s_architectures_are_kept_of_an_index_behind_a_token(registry, tmp_path):
    port, site = registry
    plan = plan_of(f"127.0.0.1:{port}/kiln/multi:1", "debian-13/x86_64")
    outcome = fetch_bundle(plan, tmp_path / "b")
    assert outcome.failed == []
    files = json.loads((tmp_path / "b" / "bundle.json").read_text())["files"]
    root = "v2/127.0.0.1/kiln/multi"
    assert files[f"{root}/manifests/1"]["media_type"] == OCI_INDEX
    amd64, _ = _image("amd64")
    arm64, arm64_blobs = _image("arm64")
    assert f"{root}/manifests/{_digest(amd64)}" in files
    assert f"{root}/manifests/{_digest(arm64)}" not in files  # not an architecture of the plan
    held = {path.rsplit("/", 1)[1] for path in files if "/blobs/" in path}
    assert held == set(_image("amd64")[1]) and not held & set(arm64_blobs)

    # kiln mirror serve answers as a registry: the index by tag, with its type and digest
    with serving(tmp_path / "b") as (url, _):
        request = urllib.request.Request(f"{url}/{root}/manifests/1")
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            assert response.headers["Content-Type"] == OCI_INDEX
            assert response.headers["Docker-Content-Digest"] == _digest(response.read())
        with urllib.request.urlopen(f"{url}/v2/", timeout=10) as response:  # noqa: S310
            assert response.headers["Docker-Distribution-API-Version"] == "registry/2.0"


def test_a_pinned_digest_the_registry_does_not_answer_with_is_refused(registry, tmp_path):
    port, site = registry
    wrong = "sha256:" + "0" * 64
    site["manifests"][wrong] = site["manifests"]["1"]  # answers, but with other bytes
    outcome = fetch_bundle(plan_of(f"127.0.0.1:{port}/kiln/multi@{wrong}", "debian-13/x86_64"),
                           tmp_path / "b")  # fmt: skip
    assert len(outcome.failed) == 1
    assert outcome.failed[0].startswith(f"image 127.0.0.1:{port}/kiln/multi@{wrong}")
    assert f"is not the {wrong} named" in outcome.failed[0]


def test_an_architecture_the_index_lacks_is_named(registry, tmp_path):
    port, site = registry
    manifest, _ = _image("amd64")
    site["manifests"]["solo"] = (
        json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            {"digest": _digest(manifest), "platform": {"os": "linux", "architecture": "amd64"}}
        ]}).encode(), OCI_INDEX,
    )  # fmt: skip
    outcome = fetch_bundle(plan_of(f"127.0.0.1:{port}/kiln/multi:solo", "ubuntu-24.04/aarch64"),
                           tmp_path / "b")  # fmt: skip
    assert outcome.failed == [f"image 127.0.0.1:{port}/kiln/multi:solo: no linux/arm64 "
                              "manifest in its index"]  # fmt: skip


def test_a_docker_hub_image_is_asked_of_docker_hub_s_registry_api():
    (line,) = images(["docker.io/library/ubuntu:22.04"], ["debian-13/x86_64"])
    assert (line.name, line.version) == ("docker.io/library/ubuntu", "22.04")
    assert line.source == "https://registry-1.docker.io/v2/library/ubuntu"


def test_an_image_reference_names_its_registry_and_a_tag_or_digest():
    assert MirrorSpec(images=["nvcr.io/nvidia/pytorch:24.05-py3"]).images
    for wrong in ("ubuntu:22.04", "nvcr.io/nvidia/pytorch", "nvcr.io/Nvidia/x:1"):
        with pytest.raises(ValueError, match="is not an image reference"):
            MirrorSpec(images=[wrong])
