"""kiln mirror fetch and serve for Python wheels (issue 30): pip resolves a plan's requirements
for each release's interpreter and C library, the wheels come with their index's sha256, and a
node's pip installs from kiln's mirror of the bundle alone.

The upstream index is a real PEP 503 simple index over HTTP, holding wheels built here: a pure
one that requires a native one, published for CPython 3.9 and 3.11 on manylinux 2.17 and for
3.11 on manylinux 2.39. RHEL 9 (Python 3.9, glibc 2.34) and Debian 12 (Python 3.11, glibc 2.36)
must each get their own build, and neither the 2.39 one.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import subprocess
import sys
import threading
import urllib.request
import zipfile
from functools import partial
from pathlib import Path

import pytest

from bundle_server import serving
from kiln.artifacts.fetch import fetch_bundle
from kiln.artifacts.wheels import index_pages, normalized, pip_target, platform_tags
from kiln.mirror.layout import MANIFEST

NATIVE = {  # file name -> the tag it carries
    "kilnprobe_native-1.2-cp39-cp39-manylinux_2_17_x86_64.whl": "cp39-cp39-manylinux_2_17_x86_64",
    "kilnprobe_native-1.2-cp311-cp311-manylinux_2_17_x86_64.whl": (
        "cp311-cp311-manylinux_2_17_x86_64"
    ),
    "kilnprobe_native-1.2-cp311-cp311-manylinux_2_39_x86_64.whl": (
        "cp311-cp311-manylinux_2_39_x86_64"
    ),
    "kilnprobe_native-1.0-cp311-cp311-manylinux_2_17_x86_64.whl": (
        "cp311-cp311-manylinux_2_17_x86_64"
    ),
}
APP = "kilnprobe_app-1.0-py3-none-any.whl"


def build_wheel(path: Path, name: str, version: str, tag: str, requires: str = "") -> None:
    """A minimal, valid wheel: one module and its dist-info (METADATA, WHEEL, RECORD)."""
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    if requires:
        metadata += f"Requires-Dist: {requires}\n"
    files = {
        f"{name}/__init__.py": f"TAG = {tag!r}\n",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: kiln-tests\n"
            f"Root-Is-Purelib: {'true' if tag.startswith('py3') else 'false'}\nTag: {tag}\n"
        ),
    }
    record = [f"{n},sha256={hashlib.sha256(t.encode()).hexdigest()},{len(t)}" for n, t in
              files.items()]  # fmt: skip
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        return


def _serve(httpd: http.server.ThreadingHTTPServer):
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def upstream(tmp_path):
    """A simple index at <url>/simple/ whose pages link wheels in <url>/files/ with sha256."""
    www = tmp_path / "www"
    (www / "files").mkdir(parents=True)
    build_wheel(www / "files" / APP, "kilnprobe_app", "1.0", "py3-none-any",
                requires="kilnprobe-native>=1")  # fmt: skip
    for name, tag in NATIVE.items():
        build_wheel(www / "files" / name, "kilnprobe_native", name.split("-")[1], tag)
    for project in ("kilnprobe-app", "kilnprobe-native"):
        links = [
            f'<a href="../../files/{f.name}#sha256={hashlib.sha256(f.read_bytes()).hexdigest()}">'
            f"{f.name}</a>"
            for f in sorted((www / "files").iterdir())
            if normalized(f.name.split("-")[0]) == project
        ]
        (www / "simple" / project).mkdir(parents=True)
        (www / "simple" / project / "index.html").write_text("\n".join(links))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=www))
    url = _serve(httpd)
    yield url, www
    httpd.shutdown()


def plan_of(index: str, *platforms: str, name: str = "kilnprobe-app") -> dict:
    artifacts = [
        {"kind": "wheel", "name": name, "version": "1.0", "platform": p, "source": index,
         "role": "burnin", "where": "roles/burnin/tasks/venv.yml:7"}
        for p in platforms
    ]  # fmt: skip
    return {"cluster": "t", "platforms": list(platforms), "artifacts": artifacts}


def test_each_release_gets_the_wheels_its_python_and_glibc_install(upstream, tmp_path):
    url, www = upstream
    index = f"{url}/simple"
    outcome = fetch_bundle(plan_of(index, "rhel-9/x86_64", "debian-12/x86_64"), tmp_path / "b")
    assert outcome.failed == []
    manifest = json.loads((tmp_path / "b" / MANIFEST).read_text())
    assert manifest["complete"] is True
    assert manifest["wheels"] == {
        "debian-12/x86_64": {"kilnprobe-app": "1.0", "kilnprobe-native": "1.2"},
        "rhel-9/x86_64": {"kilnprobe-app": "1.0", "kilnprobe-native": "1.2"},
    }
    held = {Path(p).name for p in manifest["files"] if p.endswith(".whl")}
    assert held == {
        APP,
        "kilnprobe_native-1.2-cp39-cp39-manylinux_2_17_x86_64.whl",
        "kilnprobe_native-1.2-cp311-cp311-manylinux_2_17_x86_64.whl",
    }  # not the 2.39 build (newer than either glibc), not the older 1.0
    for path, entry in manifest["files"].items():  # the publisher's bytes, checked
        if path.endswith(".whl"):
            data = (tmp_path / "b" / path).read_bytes()
            assert data == (www / "files" / Path(path).name).read_bytes()
            assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    page = "127.0.0.1/simple/kilnprobe-native/index.html"
    assert manifest["files"][page]["url"] == f"{index}/kilnprobe-native/"
    text = (tmp_path / "b" / page).read_text()
    assert "manylinux_2_39" not in text and "#sha256=" in text

    again = fetch_bundle(plan_of(index, "rhel-9/x86_64", "debian-12/x86_64"), tmp_path / "b")
    assert again.fetched == [] and len(again.kept) == 3
    assert json.loads((tmp_path / "b" / MANIFEST).read_text()) == manifest


def test_a_node_s_pip_installs_from_the_served_bundle_alone(upstream, tmp_path):
    """The upstream index is gone; pip, aimed at RHEL 9's Python, downloads the whole closure
    from kiln's mirror of the bundle, every request answered there."""
    url, _ = upstream
    fetch_bundle(plan_of(f"{url}/simple", "rhel-9/x86_64"), tmp_path / "b")
    with serving(tmp_path / "b") as (mirror, log):
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--isolated", "--no-cache-dir",
             "--disable-pip-version-check", "-q", "-d", str(tmp_path / "got"),
             "--index-url", f"{mirror}/127.0.0.1/simple", "--trusted-host", "127.0.0.1",
             *pip_target("3.9", "2.34", "x86_64"), "kilnprobe-app==1.0"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "got").iterdir()) == [
        APP,
        "kilnprobe_native-1.2-cp39-cp39-manylinux_2_17_x86_64.whl",
    ]
    statuses = [line.split()[-1] for line in log.getvalue().splitlines()]
    assert statuses and set(statuses) == {"200"}, log.getvalue()


def test_a_wheel_that_fails_its_checksum_is_named_and_left_out_of_the_index(upstream, tmp_path):
    url, _ = upstream

    def corrupting(address: str):  # a transfer that changed one byte of the native wheel
        response = urllib.request.urlopen(address, timeout=10)  # noqa: S310
        if "native" not in address:
            return response
        with response:
            data = bytearray(response.read())
        data[-1] ^= 1
        return io.BytesIO(bytes(data))

    outcome = fetch_bundle(plan_of(f"{url}/simple", "rhel-9/x86_64"), tmp_path / "b",
                           opener=corrupting)  # fmt: skip
    assert len(outcome.failed) == 1
    assert outcome.failed[0].startswith("wheel kilnprobe-native 1.2 (http://127.0.0.1:")
    assert "is not the" in outcome.failed[0]
    manifest = json.loads((tmp_path / "b" / MANIFEST).read_text())
    assert manifest["complete"] is False
    assert not any("native" in p for p in manifest["files"])
    assert not (tmp_path / "b" / "127.0.0.1" / "simple" / "kilnprobe-native").exists()
    assert "kilnprobe-app/index.html" in " ".join(manifest["files"])


def test_a_requirement_no_index_offers_is_named_with_its_release_and_index(upstream, tmp_path):
    url, _ = upstream
    outcome = fetch_bundle(plan_of(f"{url}/simple", "debian-12/x86_64", name="kilnprobe-gone"),
                           tmp_path / "b")  # fmt: skip
    assert len(outcome.failed) == 1
    failed = outcome.failed[0]
    assert failed.startswith(f"wheel kilnprobe-gone==1.0 (debian-12/x86_64, {url}/simple): ")
    assert "kilnprobe-gone" in failed.split(": ", 1)[1]


def test_pages_link_each_wheel_relative_to_the_page_with_its_name_encoded():
    from kiln.artifacts.wheels import Wheel

    wheel = Wheel("torch", "2.5.1+cu124",
                  "https://download.pytorch.org/whl/cu124/torch-2.5.1%2Bcu124-cp311-cp311-"
                  "linux_x86_64.whl", "ab" * 32)  # fmt: skip
    pages = index_pages("https://download.pytorch.org/whl/cu124", [wheel])
    ((path, page),) = pages.items()
    assert path == "download.pytorch.org/whl/cu124/torch/index.html"
    assert f'href="../torch-2.5.1%2Bcu124-cp311-cp311-linux_x86_64.whl#sha256={"ab" * 32}"' in page
    assert normalized("Typing_Extensions") == "typing-extensions"


def test_a_node_accepts_every_manylinux_level_its_glibc_meets_then_plain_linux():
    tags = platform_tags("2.34", "aarch64")
    assert tags[0] == "manylinux_2_34_aarch64" and tags[-1] == "linux_aarch64"
    assert "manylinux2014_aarch64" in tags and "manylinux_2_35_aarch64" not in tags
    assert "manylinux1_aarch64" not in tags  # the oldest aliases were x86 only
    assert {"manylinux2010_x86_64", "manylinux1_x86_64"} <= set(platform_tags("2.36", "x86_64"))
