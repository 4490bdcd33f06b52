"""kiln mirror serve: a bundle over HTTP, only the files its bundle.json lists, every request
logged (what the nodes asked for, to hold against the plan)."""

import io
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kiln.app import main
from kiln.artifacts.serve import BundleError, mirror_server
from kiln.mirror.layout import MANIFEST

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bundle(tmp_path):
    root = tmp_path / "bundle"
    deb = root / "deb.debian.org" / "debian" / "pool" / "main" / "c" / "chrony"
    deb.mkdir(parents=True)
    (deb / "chrony_4.6.1-3+deb13u2_amd64.deb").write_bytes(b"a package")
    (deb / "half.deb.part").write_bytes(b"cut short")
    (root / "stray.txt").write_text("copied in by hand")
    listed = "deb.debian.org/debian/pool/main/c/chrony/chrony_4.6.1-3+deb13u2_amd64.deb"
    (root / MANIFEST).write_text(json.dumps({"files": {listed: {}}}))
    return root, listed


@pytest.fixture
def served(bundle):
    root, listed = bundle
    log = io.StringIO()
    server = mirror_server(root, "127.0.0.1", 0, log)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", listed, log
    server.shutdown()
    server.server_close()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_only_the_files_the_manifest_lists_are_served(served):
    base, listed, log = served
    with urllib.request.urlopen(f"{base}/{listed}", timeout=10) as response:  # noqa: S310
        assert response.read() == b"a package"
    quoted = listed.replace("+", "%2b")  # as apt asks for it
    assert _status(f"{base}/{quoted}") == 200
    for path in ("stray.txt", MANIFEST, "deb.debian.org/debian/pool/main/c/chrony/half.deb.part",
                 "", "deb.debian.org/", "../bundle.json", "%2e%2e/etc/passwd"):  # fmt: skip
        assert _status(f"{base}/{path}") == 404, path
    lines = log.getvalue().splitlines()
    assert lines[0].split()[2:] == ["GET", f"/{listed}", "200"]
    assert [line.split()[-1] for line in lines] == ["200", "200"] + ["404"] * 7


def test_a_folder_that_is_not_a_bundle_is_refused(tmp_path, capsys):
    with pytest.raises(BundleError, match="is not a kiln bundle"):
        mirror_server(tmp_path, "127.0.0.1", 0, io.StringIO())
    with pytest.raises(SystemExit) as exit_:
        main(["mirror", "serve", str(tmp_path), "--port", "1"])
    assert exit_.value.code == 2
    assert "make one with `kiln mirror fetch`" in capsys.readouterr().err


def test_the_server_runs_with_the_standard_library_alone(bundle):
    """A mirror host may have Python and nothing else: -S keeps site-packages out."""
    root, _ = bundle
    program = (
        "import sys, pathlib; sys.path.insert(0, sys.argv[1]); import kiln.artifacts.serve as s; "
        "print(len(s.bundle_files(pathlib.Path(sys.argv[2]))))"
    )
    argv = [sys.executable, "-S", "-c", program, str(ROOT / "cli"), str(root)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout.strip()) == (0, "1"), result.stderr
