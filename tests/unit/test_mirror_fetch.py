"""kiln mirror fetch: a plan's artifacts into a bundle, every index and file checked.

A real signed apt repository is built here (gpg makes a throwaway key and signs its InRelease,
the Packages index is xz-compressed as Debian's is) and served over HTTP from a local port; the
real Debian index recorded in tests/fixtures/real/debian-archive is read and verified too.
"""

import hashlib
import http.server
import json
import lzma
import shutil
import subprocess
import threading
from functools import partial
from pathlib import Path

import pytest

from kiln.app import main
from kiln.artifacts.apt import PackageIndex, installed_packages, resolve
from kiln.artifacts.bundle import FetchError
from kiln.artifacts.debversion import compare
from kiln.artifacts.fetch import fetch_bundle
from kiln.artifacts.signatures import verify_signature
from kiln.mirror.layout import MANIFEST, mirror_path

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real" / "debian-archive"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")

pytestmark = pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg is not installed")


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        self.server.requests.append(self.path)


@pytest.fixture
def server(tmp_path):
    """A static HTTP server of tmp_path/www; .requests lists the paths asked for."""
    www = tmp_path / "www"
    www.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=www))
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    httpd.www = www
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield httpd
    httpd.shutdown()


def _gpg(home: Path, *args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["gpg", "--homedir", str(home), "--batch", "--yes", *args],
                          input=stdin, capture_output=True, check=True).stdout  # fmt: skip


@pytest.fixture(scope="module")
def signer(tmp_path_factory):
    """A throwaway signing key: (gpg home, its public keyring file)."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    _gpg(home, "--passphrase", "", "--quick-gen-key", "kiln test archive <test@kiln>",
         "ed25519", "sign", "never")  # fmt: skip
    keyring = home / "archive.gpg"
    keyring.write_bytes(_gpg(home, "--export"))
    yield home, keyring
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)


def _stanza(name: str, version: str, data: bytes, **fields: str) -> tuple[str, str, bytes]:
    filename = f"pool/main/{name[0]}/{name}/{name}_{version}_amd64.deb"
    lines = [f"Package: {name}", f"Version: {version}", "Architecture: amd64",
             f"Filename: {filename}", f"Size: {len(data)}",
             f"SHA256: {hashlib.sha256(data).hexdigest()}"]  # fmt: skip
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in fields.items()]
    return "\n".join(lines) + "\n", filename, data


def build_repository(www: Path, signer, stanzas) -> Path:
    """dists/test/{InRelease, main/binary-amd64/Packages.xz} and the pool, signed."""
    home, _ = signer
    repo = www / "debian"
    for _, filename, data in stanzas:
        (repo / filename).parent.mkdir(parents=True, exist_ok=True)
        (repo / filename).write_bytes(data)
    packages = lzma.compress("\n".join(text for text, _, _ in stanzas).encode())
    index = repo / "dists" / "test" / "main" / "binary-amd64" / "Packages.xz"
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_bytes(packages)
    release = (
        "Origin: kiln test\nSuite: test\nAcquire-By-Hash: yes\nSHA256:\n"
        f" {hashlib.sha256(packages).hexdigest()} {len(packages)} main/binary-amd64/Packages.xz\n"
    )
    (repo / "dists" / "test" / "InRelease").write_bytes(
        _gpg(home, "--clearsign", "-o", "-", stdin=release.encode())
    )
    return repo


def plan_of(server, keyring: Path, debs, files=()) -> dict:
    platform = "debian-13/x86_64"
    artifacts = [
        {"kind": "repository", "name": f"{server.url}/debian", "version": "",
         "platform": platform, "source": f"{server.url}/debian", "suite": "test main",
         "checksum": str(keyring), "role": "", "where": "mirror/archives.yml",
         "when": "", "unresolved": ""},
    ]  # fmt: skip
    for name, version in debs:
        artifacts.append({"kind": "deb", "name": name, "version": version, "platform": platform,
                          "source": "", "suite": "", "checksum": "", "role": "base",
                          "where": "roles/base/tasks/main.yml:1", "when": "",
                          "unresolved": ""})  # fmt: skip
    for url, checksum in files:
        artifacts.append({"kind": "file", "name": url.rsplit("/", 1)[-1], "version": "",
                          "platform": platform, "source": url, "suite": "",
                          "checksum": checksum, "role": "nccl",
                          "where": "roles/nccl/tasks/nccl_tests.yml:10", "when": "",
                          "unresolved": ""})  # fmt: skip
    return {"kiln": "mirror-plan", "schema_version": 1, "cluster": "test",
            "platforms": [platform], "artifacts": artifacts}  # fmt: skip


STANZAS = [
    _stanza("tool", "1.0-1", b"tool 1.0"),
    _stanza(
        "tool",
        "1.2-1",
        b"tool 1.2",
        Depends="libfoo (>= 2), mail-transport-agent | mta-x",
        Recommends="tool-doc, not-in-any-repository",
    ),
    _stanza("tool-doc", "1.2-1", b"docs"),  # apt installs Recommends by default
    _stanza("tool", "2.0-1", b"tool 2.0"),
    _stanza("libfoo", "1.9-1", b"libfoo 1.9"),
    _stanza("libfoo", "2.1-1", b"libfoo 2.1", Pre_Depends="libc6 (>= 2.36)"),
    _stanza("postfix", "3.7-1", b"postfix", Provides="mail-transport-agent"),
    _stanza("libc6", "2.41-1", b"libc", Priority="required"),
    _stanza("unwanted", "1.0-1", b"never fetched"),
]


def test_a_plan_is_fetched_with_dependencies_and_checked(server, signer, tmp_path):
    build_repository(server.www, signer, STANZAS)
    tarball = server.www / "releases" / "v1.tar.gz"
    tarball.parent.mkdir()
    tarball.write_bytes(b"source tarball")
    digest = hashlib.sha256(b"source tarball").hexdigest()
    plan = plan_of(server, signer[1], [("tool", "1.2*")],
                   [(f"{server.url}/releases/v1.tar.gz", f"sha256:{digest}")])  # fmt: skip
    bundle = tmp_path / "bundle"
    outcome = fetch_bundle(plan, bundle)
    assert outcome.failed == []
    host = "127.0.0.1/debian"  # the bundle keeps host and path (the port is the server's)
    pool = sorted(p for p in outcome.fetched if "/pool/" in p)
    assert pool == [
        f"{host}/pool/main/l/libc6/libc6_2.41-1_amd64.deb",  # the whole closure: a node may
        f"{host}/pool/main/l/libfoo/libfoo_2.1-1_amd64.deb",  # need a newer libc than it has
        f"{host}/pool/main/p/postfix/postfix_3.7-1_amd64.deb",  # Provides: the MTA alternative
        f"{host}/pool/main/t/tool-doc/tool-doc_1.2-1_amd64.deb",  # recommended: apt takes it
        f"{host}/pool/main/t/tool/tool_1.2-1_amd64.deb",  # the newest 1.2*, not 2.0
    ]  # a Recommends no repository has is skipped, as apt skips it
    assert "127.0.0.1/releases/v1.tar.gz" in outcome.fetched
    manifest = json.loads((bundle / MANIFEST).read_text())
    assert manifest["complete"] is True
    assert manifest["packages"] == {  # the exact versions the plan's lines resolved to
        "debian-13/x86_64": {"libc6": "2.41-1", "libfoo": "2.1-1", "postfix": "3.7-1",
                             "tool": "1.2-1", "tool-doc": "1.2-1"},
    }  # fmt: skip
    assert set(manifest["files"]) == {
        str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file() and p.name != MANIFEST
    }
    for relative, entry in manifest["files"].items():
        assert hashlib.sha256((bundle / relative).read_bytes()).hexdigest() == entry["sha256"]
        assert mirror_path(entry["url"]) == relative
    # apt asks for the index by its hash (Acquire-By-Hash): that path is in the bundle too
    packages = bundle / host / "dists/test/main/binary-amd64/Packages.xz"
    by_hash = (
        packages.parent / "by-hash" / "SHA256" / hashlib.sha256(packages.read_bytes()).hexdigest()
    )
    assert by_hash.read_bytes() == packages.read_bytes()


def test_a_second_run_fetches_only_what_is_missing(server, signer, tmp_path):
    build_repository(server.www, signer, STANZAS)
    plan = plan_of(server, signer[1], [("tool", "1.2*")])
    bundle = tmp_path / "bundle"
    first = fetch_bundle(plan, bundle)
    (bundle / first.fetched[-1]).unlink()  # one file lost
    server.requests.clear()
    second = fetch_bundle(plan, bundle)
    assert second.fetched == [first.fetched[-1]]
    assert len(second.kept) == len(first.fetched) - 1
    assert [r for r in server.requests if "/pool/" in r] == [
        "/" + first.fetched[-1].split("/", 1)[1]
    ]


def test_a_checksum_that_does_not_hold_names_the_package_and_keeps_nothing(
    server, signer, tmp_path
):
    repo = build_repository(server.www, signer, STANZAS)
    (repo / "pool/main/l/libfoo/libfoo_2.1-1_amd64.deb").write_bytes(b"tampered")
    bundle = tmp_path / "bundle"
    outcome = fetch_bundle(plan_of(server, signer[1], [("tool", "1.2*")]), bundle)
    (failure,) = outcome.failed
    assert failure.startswith("deb libfoo 2.1-1 (http://127.0.0.1:")
    assert "libfoo_2.1-1_amd64.deb): sha256 " in failure and "is not the" in failure
    assert not [p for p in bundle.rglob("libfoo*") if p.is_file()] and not list(
        bundle.rglob("*.part")
    )
    manifest = json.loads((bundle / MANIFEST).read_text())
    assert manifest["complete"] is False and manifest["failed"] == [failure]
    assert not any("libfoo" in path for path in manifest["files"])


def test_an_index_whose_signature_does_not_verify_is_refused(server, signer, tmp_path):
    repo = build_repository(server.www, signer, STANZAS)
    inrelease = repo / "dists" / "test" / "InRelease"
    inrelease.write_text(inrelease.read_text().replace("Suite: test", "Suite: evil"))
    outcome = fetch_bundle(plan_of(server, signer[1], [("tool", "")]), tmp_path / "bundle")
    assert outcome.failed[0].startswith(
        f"repository {server.url}/debian test main (debian-13/x86_64)"
    )
    assert "its signature does not verify" in outcome.failed[0]
    assert (
        outcome.failed[1]
        == "deb tool (any version): in no repository of the plan (debian-13/x86_64)"
    )
    assert outcome.fetched == []


def test_what_no_repository_offers_and_an_unreachable_source_are_named(server, signer, tmp_path):
    build_repository(server.www, signer, STANZAS)
    plan = plan_of(server, signer[1], [("tool", "9.9"), ("absent", "")],
                   [("http://127.0.0.1:9/nowhere.tar.gz", "")])  # fmt: skip
    outcome = fetch_bundle(plan, tmp_path / "bundle")
    assert outcome.failed[:2] == [
        "deb tool 9.9: offered: 1.0-1, 1.2-1, 2.0-1 (debian-13/x86_64)",
        "deb absent (any version): in no repository of the plan (debian-13/x86_64)",
    ]
    assert outcome.failed[2].startswith("file nowhere.tar.gz (http://127.0.0.1:9/nowhere.tar.gz): ")


def test_an_interrupted_fetch_leaves_whole_files_and_a_true_manifest(server, signer, tmp_path):
    build_repository(server.www, signer, STANZAS)
    plan = plan_of(server, signer[1], [("tool", "1.2*")])
    bundle = tmp_path / "bundle"

    def stop_at_second_file(done, total, got, size, what):
        if done == 1 and got == size:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fetch_bundle(plan, bundle, stop_at_second_file)
    manifest = json.loads((bundle / MANIFEST).read_text())
    assert manifest["complete"] is False
    pool = [p for p in manifest["files"] if "/pool/" in p]
    assert len(pool) == 1 and not list(bundle.rglob("*.part"))
    assert fetch_bundle(plan, bundle).failed == []
    assert json.loads((bundle / MANIFEST).read_text())["complete"] is True


def test_the_command_reads_a_plan_and_exits_1_naming_what_failed(server, signer, tmp_path, capsys):
    build_repository(server.www, signer, STANZAS)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan_of(server, signer[1], [("tool", ""), ("absent", "")])))
    with pytest.raises(SystemExit) as exit_:
        main(["mirror", "fetch", str(plan_file), "--to", str(tmp_path / "bundle")])
    err = capsys.readouterr().err
    assert exit_.value.code == 1
    assert "not fetched: deb absent (any version): in no repository of the plan" in err
    assert "1 fetched" in err
    plan_file.write_text("{}")
    with pytest.raises(SystemExit) as exit_:
        main(["mirror", "fetch", str(plan_file), "--to", str(tmp_path / "bundle")])
    assert exit_.value.code == 2
    assert "is not a mirror plan" in capsys.readouterr().err


@pytest.mark.skipif(not DEBIAN_KEYRING.is_file(), reason="debian-archive-keyring not installed")
def test_debian_s_real_index_verifies_and_a_changed_byte_does_not(tmp_path):
    verify_signature(REAL / "trixie-InRelease", [DEBIAN_KEYRING])
    changed = tmp_path / "InRelease"
    changed.write_text(
        (REAL / "trixie-InRelease").read_text().replace("Version: 13.8", "Version: 13.9")
    )
    with pytest.raises(FetchError, match="its signature does not verify"):
        verify_signature(changed, [DEBIAN_KEYRING])


def test_debian_s_real_index_resolves_slurmd_and_chrony():
    index = PackageIndex.parse((REAL / "trixie-main-amd64-Packages").read_text(),
                               "https://deb.debian.org/debian")  # fmt: skip
    found = resolve(index, [("slurmd", "24.11.5*"), ("chrony", "")])
    assert found.missing == []
    names = {p.name: p.version for p in found.packages}
    assert names["slurmd"].startswith("24.11.5") and "slurm-wlm-basic-plugins" in names
    assert "chrony" in names and names["libc6"] == "2.41-12+deb13u5"  # the closure, base too
    slurmd = next(p for p in found.packages if p.name == "slurmd")
    assert slurmd.url.startswith("https://deb.debian.org/debian/pool/main/s/slurm-wlm/")


@pytest.mark.parametrize(
    ("older", "newer"),
    [("1.0~rc1", "1.0"), ("1.0", "1.0-1"), ("2.25.1-1+cuda12.8", "2.25.1-1+cuda12.10"),
     ("9.9", "1:0.1"), ("1.0-1~deb12u1", "1.0-1"), ("1.0-1", "1.0-1+deb12u1"),
     ("24.05.8-1", "24.11.5-1"), ("7.88.1-10+deb12u5", "7.88.1-10+deb12u12"), ("1.0~~", "1.0~")],
)  # fmt: skip
def test_versions_compare_as_dpkg_does(older, newer):
    assert compare(older, newer) < 0 < compare(newer, older)
    assert compare(newer, newer) == 0


def test_a_versioned_relation_is_met_by_a_provides_of_that_version_only():
    index = PackageIndex.parse(
        "Package: python3-zmq\nVersion: 26-1\nArchitecture: amd64\nFilename: pool/z.deb\n"
        "SHA256: 00\nDepends: python3-cffi-backend-api-max (>= 9729), mta\n\n"
        "Package: python3-cffi-backend\nVersion: 1.17-1\nArchitecture: amd64\n"
        "Filename: pool/c.deb\nSHA256: 01\n"
        "Provides: python3-cffi-backend-api-9729, python3-cffi-backend-api-max (= 9729)\n\n"
        "Package: exim4\nVersion: 4.98-1\nArchitecture: amd64\nFilename: pool/e.deb\n"
        "SHA256: 02\nProvides: mta\n\n"
        "Package: old\nVersion: 1-1\nArchitecture: amd64\nFilename: pool/o.deb\nSHA256: 03\n"
        "Depends: mta (>= 2)\n",
        "https://deb.debian.org/debian",
    )
    found = resolve(index, [("python3-zmq", "")])
    assert (found.missing, sorted(p.name for p in found.packages)) == (
        [], ["exim4", "python3-cffi-backend", "python3-zmq"]
    )  # fmt: skip
    # an unversioned Provides never meets a versioned relation (dpkg's rule)
    assert resolve(index, [("old", "")]).missing == ["mta (>= 2): needed by old, in no repository"]


def test_recommends_come_along_only_where_a_task_installs_them():
    """A task with install_recommends: false brings its packages' Depends, not their
    Recommends; a package another task brings in with Recommends has them followed."""
    index = PackageIndex()
    index.add(
        "Package: exporter\nVersion: 1-1\nArchitecture: amd64\nFilename: pool/x.deb\n"
        "SHA256: 00\nDepends: libc\nRecommends: extras\n\n"
        "Package: libc\nVersion: 2-1\nArchitecture: amd64\nFilename: pool/l.deb\nSHA256: 01\n"
        "Recommends: locales\n\n"
        "Package: extras\nVersion: 1-1\nArchitecture: amd64\nFilename: pool/e.deb\nSHA256: 02\n\n"
        "Package: locales\nVersion: 1-1\nArchitecture: amd64\nFilename: pool/o.deb\n"
        "SHA256: 03\n\n"
        "Package: tool\nVersion: 1-1\nArchitecture: amd64\nFilename: pool/t.deb\nSHA256: 04\n"
        "Depends: exporter\n",
        "https://deb.debian.org/debian",
    )
    alone = resolve(index, [("exporter", "", False)])
    assert sorted(p.name for p in alone.packages) == ["exporter", "libc"]
    both = resolve(index, [("exporter", "", False), ("tool", "", True)])
    assert sorted(p.name for p in both.packages) == ["exporter", "extras", "libc", "locales",
                                                     "tool"]  # fmt: skip
    assert sorted(p.name for p in resolve(index, [("exporter", "")]).packages) == [
        "exporter", "extras", "libc", "locales"
    ]  # fmt: skip


def test_alternatives_are_chosen_as_apt_marks_them():
    """Debian 13's own relations: libtorch2.6's Depends pick libblas3, so its Recommends
    "libopenblas0 | ... | libblas3" take nothing more; dpkg-dev's Recommends "sq | ... | gnupg"
    take sq, the first, since gnupg is not marked yet when apt reaches them (what apt did on
    the air-gapped sandbox's nodes)."""
    index = PackageIndex()
    index.add(
        "Package: libtorch2.6\nVersion: 2.6.0-7\nArchitecture: amd64\nFilename: pool/t.deb\n"
        "SHA256: 00\nDepends: libblas3 | libblas.so.3\n"
        "Recommends: libopenblas0 | libblis3 | libatlas3-base | libmkl-rt | libblas3\n\n"
        "Package: libblas3\nVersion: 3.12-1\nArchitecture: amd64\nFilename: pool/b.deb\n"
        "SHA256: 01\nProvides: libblas.so.3\n\n"
        "Package: libopenblas0\nVersion: 0.3-1\nArchitecture: amd64\nFilename: pool/o.deb\n"
        "SHA256: 02\n\n"
        "Package: dpkg-dev\nVersion: 1.22.22\nArchitecture: all\nFilename: pool/d.deb\n"
        "SHA256: 03\nRecommends: sq | sqop | rsop | gosop | pgpainless-cli | gpg-sq | gnupg\n\n"
        "Package: sq\nVersion: 1.3.1-2\nArchitecture: amd64\nFilename: pool/s.deb\nSHA256: 04\n\n"
        "Package: gnupg\nVersion: 2.4.7-21\nArchitecture: all\nFilename: pool/g.deb\n"
        "SHA256: 05\n\n"
        "Package: build-essential\nVersion: 12.12\nArchitecture: amd64\nFilename: pool/e.deb\n"
        "SHA256: 06\nDepends: dpkg-dev\nRecommends: gnupg\n",
        "https://deb.debian.org/debian",
    )
    torch = resolve(index, [("libtorch2.6", "")])
    assert sorted(p.name for p in torch.packages) == ["libblas3", "libtorch2.6"]
    tools = resolve(index, [("build-essential", "")])
    assert sorted(p.name for p in tools.packages) == ["build-essential", "dpkg-dev", "gnupg", "sq"]


def test_what_a_node_has_installed_is_not_fetched_again():
    """With the node's dpkg status: an installed package a relation or a task accepts takes
    nothing, nor do its Recommends; one a relation needs newer is fetched (an upgrade), and
    a pin the installed version misses fetches the pinned one."""
    index = PackageIndex()
    index.add(
        "Package: slurmd\nVersion: 24.11.5-4\nArchitecture: amd64\nFilename: pool/s.deb\n"
        "SHA256: 00\nDepends: libc6 (>= 2.38), systemd | binfmt-support\n\n"
        "Package: libc6\nVersion: 2.41-12\nArchitecture: amd64\nFilename: pool/c.deb\n"
        "SHA256: 01\n\n"
        "Package: binfmt-support\nVersion: 2.2-1\nArchitecture: amd64\nFilename: pool/b.deb\n"
        "SHA256: 02\n\n"
        "Package: chrony\nVersion: 4.6-3\nArchitecture: amd64\nFilename: pool/h.deb\n"
        "SHA256: 03\n\n"
        "Package: chrony\nVersion: 4.7-1\nArchitecture: amd64\nFilename: pool/h2.deb\n"
        "SHA256: 04\n",
        "https://deb.debian.org/debian",
    )
    status = (
        "Package: libc6\nStatus: install ok installed\nVersion: 2.36-9\n\n"
        "Package: systemd\nStatus: install ok installed\nVersion: 257.7-1\n"
        "Recommends: dbus\n\n"
        "Package: chrony\nStatus: install ok installed\nVersion: 4.6-3\n\n"
        "Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n"
    )
    installed = installed_packages(status)
    assert sorted(p.name for p in installed) == ["chrony", "libc6", "systemd"]
    found = resolve(index, [("slurmd", "24.11.5*"), ("chrony", "")], installed)
    # libc6 2.36 is older than slurmd needs: fetched; systemd meets the alternative; chrony stays
    assert [(p.name, p.version) for p in found.packages] == [
        ("libc6", "2.41-12"), ("slurmd", "24.11.5-4")
    ]  # fmt: skip
    pinned = resolve(index, [("chrony", "4.7*")], installed)
    assert [(p.name, p.version) for p in pinned.packages] == [("chrony", "4.7-1")]


def test_the_nodes_dpkg_status_leaves_out_what_they_have(server, signer, tmp_path, capsys):
    """--installed: libc6 and postfix on the nodes already (postfix meets the MTA
    alternative): neither is fetched; a platform the plan has no debs for is refused."""
    build_repository(server.www, signer, STANZAS)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan_of(server, signer[1], [("tool", "1.2*")])))
    status = tmp_path / "status"
    status.write_text(
        "Package: libc6\nStatus: install ok installed\nVersion: 2.41-1\n\n"
        "Package: postfix\nStatus: install ok installed\nVersion: 3.7-1\n"
        "Provides: mail-transport-agent\n"
    )
    bundle = tmp_path / "bundle"
    with pytest.raises(SystemExit) as exit_:
        main(["mirror", "fetch", str(plan_file), "--to", str(bundle),
              "--installed", f"debian-13/x86_64={status}"])  # fmt: skip
    assert exit_.value.code == 0, capsys.readouterr().err
    manifest = json.loads((bundle / MANIFEST).read_text())
    assert manifest["packages"] == {
        "debian-13/x86_64": {"libfoo": "2.1-1", "tool": "1.2-1", "tool-doc": "1.2-1"}
    }
    assert list(manifest["installed_baseline"]) == ["debian-13/x86_64"]
    with pytest.raises(SystemExit) as exit_:
        main(["mirror", "fetch", str(plan_file), "--to", str(bundle),
              "--installed", f"rhel-9/x86_64={status}"])  # fmt: skip
    assert exit_.value.code == 2
    assert "not PLATFORM=FILE for a platform whose debs the plan names" in capsys.readouterr().err
