"""Container images through kiln's mirror (#30): kiln_mirror.images planned, fetched from a real
registry by digest and served by `kiln mirror serve` as a registry Docker pulls from.

The upstream is the CNCF distribution registry (Debian's docker-registry package) on a local
port, holding an image pushed by Docker; the mirror serves the bundle with the upstream gone,
and Docker pulls the image from it by tag and by digest: the same image, every request answered
from the bundle.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from dataclasses import asdict
from pathlib import Path

import pytest

from bundle_server import serving
from kiln.artifacts.fetch import fetch_bundle
from kiln.artifacts.plan import images
from kiln.sandbox.docker import require_docker
from registry_server import running_registry

from .conftest import run_docker

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("docker-registry") is None,
        reason="docker-registry is not installed (make system-deps)",
    ),
]


@pytest.fixture
def upstream(tmp_path):
    """A registry on 127.0.0.1 holding kiln/probe:1 (one layer: a text file): its address and
    the image's id."""
    require_docker()
    with running_registry(tmp_path, "127.0.0.1") as port:
        address = f"127.0.0.1:{port}"
        image = f"{address}/kiln/probe:1"
        try:
            (tmp_path / "hello.txt").write_text("kiln mirror image probe\n")
            with tarfile.open(tmp_path / "rootfs.tar", "w") as tar:
                tar.add(tmp_path / "hello.txt", arcname="hello.txt")
            run_docker("import", str(tmp_path / "rootfs.tar"), image)
            run_docker("push", image)
            image_id = run_docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
            run_docker("image", "rm", image)  # gone from Docker: a pull must fetch every blob
            yield address, image_id
        finally:
            run_docker("image", "rm", "--force", image, check=False)


def test_an_image_is_fetched_by_digest_and_docker_pulls_it_from_the_mirror(upstream, tmp_path):
    address, image_id = upstream
    lines = images([f"{address}/kiln/probe:1"], ["debian-13/x86_64"])
    plan = {"cluster": "t", "platforms": ["debian-13/x86_64"],
            "artifacts": [asdict(line) for line in lines]}  # fmt: skip
    outcome = fetch_bundle(plan, tmp_path / "b")
    assert outcome.failed == []
    manifest = json.loads((tmp_path / "b" / "bundle.json").read_text())
    root = "v2/127.0.0.1/kiln/probe"
    tagged = manifest["files"][f"{root}/manifests/1"]
    digest = "sha256:" + tagged["sha256"]
    assert manifest["files"][f"{root}/manifests/{digest}"]["media_type"] == tagged["media_type"]
    blobs = [p for p in manifest["files"] if p.startswith(f"{root}/blobs/sha256:")]
    assert len(blobs) == 2  # the config and the one layer, each checked against its digest
    assert "sha256:" + manifest["files"][blobs[0]]["sha256"] == Path(blobs[0]).name

    with serving(tmp_path / "b") as (url, log):
        mirror = url.removeprefix("http://")
        names = [f"{mirror}/127.0.0.1/kiln/probe:1", f"{mirror}/127.0.0.1/kiln/probe@{digest}"]
        try:
            for name in names:
                run_docker("pull", name, timeout=120)
                pulled = run_docker("image", "inspect", "--format", "{{.Id}}", name)
                assert pulled.stdout.strip() == image_id, name  # the very image pushed upstream
        finally:
            for name in names:
                run_docker("image", "rm", "--force", name, check=False)
    asked = [line.split() for line in log.getvalue().splitlines()]
    assert asked and {status for *_, status in asked} == {"200"}, log.getvalue()
    fetched_blobs = {Path(path).name for _, _, _, path, _ in asked if "/blobs/" in path}
    assert fetched_blobs == {Path(b).name for b in blobs}, log.getvalue()
