"""kiln mirror fetch for dnf repositories (issue 30): a RHEL node's rpms from the plan's
repositories, with their requirements, every index and package checked.

The repository is real: rpms built here with rpmbuild, signed with rpmsign by a throwaway key,
indexed by createrepo_c and its repomd.xml signed (repo_gpgcheck), served over HTTP (Debian's
rpm and createrepo-c packages; the tests skip without them). rpm's version order is checked
against rpm's own (rpm.vercmp) on thousands of pairs.
"""

from __future__ import annotations

import http.server
import json
import os
import random
import shutil
import subprocess
import threading
from functools import partial
from pathlib import Path

import pytest

from bundle_server import serving
from kiln.app import main
from kiln.artifacts.fetch import fetch_bundle
from kiln.artifacts.rpm import RpmIndex, resolve, vercmp
from kiln.mirror.layout import MANIFEST

# `local`: real rpm tools on this machine, which make system-deps installs before test-local
pytestmark = [
    pytest.mark.local,
    pytest.mark.skipif(
        not all(shutil.which(tool) for tool in ("rpmbuild", "rpmsign", "rpmkeys",
                                                 "createrepo_c", "gpg")),
        reason="rpm, createrepo-c or gpg is not installed (make system-deps)",
    ),
]  # fmt: skip

PLATFORM = "rhel-9/x86_64"
SPEC = """Name: {name}
Version: {version}
Release: 1
Summary: kiln test package
License: MIT
BuildArch: noarch
{extra}
%description
kiln test package
%files
"""
PACKAGES = [  # name, version, Requires/Provides lines, signed
    ("kilnprobe-lib", "1.0", "Provides: kilnprobe-api = 3", True),
    ("kilnprobe-lib", "1.2", "Provides: kilnprobe-api = 3", True),
    ("kilnprobe-tool", "2.0", "Requires: kilnprobe-lib >= 1.1\nRequires: /bin/sh\n"
     "Requires: libc.so.6()(64bit)\nRequires: kilnprobe-api >= 2\n"
     "Requires: (kilnprobe-extra if kilnprobe-lib)", True),
    ("kilnprobe-unsigned", "1.0", "", False),
]  # fmt: skip


def _run(*argv: str, env: dict | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A signed dnf repository at www/repo: (www, armored public key path)."""
    top = tmp_path_factory.mktemp("rpm")
    gnupg = top / "gnupg"
    gnupg.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(gnupg)}
    _run("gpg", "--batch", "--passphrase", "", "--quick-gen-key", "kiln-test-rpm",
         "rsa2048", "sign", "never", env=env)  # fmt: skip
    www = top / "www"
    repo = www / "repo"
    repo.mkdir(parents=True)
    for name, version, extra, signed in PACKAGES:
        spec = top / f"{name}-{version}.spec"
        spec.write_text(SPEC.format(name=name, version=version, extra=extra))
        _run("rpmbuild", "-bb", "--define", f"_topdir {top / 'build'}", str(spec), env=env)
        built = top / "build" / "RPMS" / "noarch" / f"{name}-{version}-1.noarch.rpm"
        if signed:
            _run(
                "rpmsign",
                "--define",
                "_gpg_name kiln-test-rpm",
                "--define",
                f"_gpg_path {gnupg}",
                "--define",
                f"__gpg {shutil.which('gpg')}",
                "--addsign",
                str(built),
                env=env,
            )  # fmt: skip (Debian's rpm names gpg2)
        shutil.copy(built, repo)
    _run("createrepo_c", "-q", str(repo), env=env)
    _run("gpg", "--batch", "--armor", "--detach-sign", str(repo / "repodata" / "repomd.xml"),
         env=env)  # fmt: skip
    key = www / "RPM-GPG-KEY-kiln"
    key.write_text(_run("gpg", "--armor", "--export", "kiln-test-rpm", env=env))
    yield www
    subprocess.run(["gpgconf", "--homedir", str(gnupg), "--kill", "gpg-agent"], check=False)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        return


@pytest.fixture
def upstream(published, tmp_path):
    """The published repository, copied (a test may change it), over HTTP: its URL."""
    www = tmp_path / "www"
    shutil.copytree(published, www)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=www))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", www
    httpd.shutdown()


def plan_of(url: str, *rpms: tuple[str, str]) -> dict:
    line = {"platform": PLATFORM, "role": "site_repo", "where": "roles/x/tasks/main.yml:1"}
    artifacts = [
        {**line, "kind": "key", "name": "RPM-GPG-KEY-kiln", "version": "",
         "source": f"{url}/RPM-GPG-KEY-kiln"},
        {**line, "kind": "repository", "name": f"{url}/repo/", "version": "",
         "source": f"{url}/repo/", "suite": "", "checksum": ""},
        *({**line, "kind": "rpm", "name": name, "version": pin,
           "source": f"dnf repositories of {PLATFORM}"} for name, pin in rpms),
    ]  # fmt: skip
    return {"cluster": "t", "platforms": [PLATFORM], "artifacts": artifacts}


def test_rpms_come_with_their_requirements_and_the_rest_is_left_to_the_node(upstream, tmp_path):
    url, www = upstream
    outcome = fetch_bundle(plan_of(url, ("kilnprobe-tool", ""), ("chrony", "")), tmp_path / "b")
    assert outcome.failed == []
    manifest = json.loads((tmp_path / "b" / MANIFEST).read_text())
    assert manifest["complete"] is True
    # the newest lib that meets tool's `>= 1.1` (and provides the API it asks for)
    assert manifest["packages"] == {PLATFORM: {"kilnprobe-lib": "1.2-1", "kilnprobe-tool": "2.0-1"}}
    assert manifest["from_node_repositories"] == {
        PLATFORM: ["(kilnprobe-extra if kilnprobe-lib)", "/bin/sh", "chrony", "libc.so.6()(64bit)"]
    }
    files = manifest["files"]
    rpms = sorted(Path(p).name for p in files if p.endswith(".rpm"))
    assert rpms == ["kilnprobe-lib-1.2-1.noarch.rpm", "kilnprobe-tool-2.0-1.noarch.rpm"]
    for path in files:
        if path.startswith("127.0.0.1/repo/"):  # the publisher's bytes, index and packages
            rel = path.removeprefix("127.0.0.1/")
            assert (tmp_path / "b" / path).read_bytes() == (www / rel).read_bytes(), path
    kinds = {Path(p).name.split("-", 1)[-1] for p in files if "/repodata/" in p}
    assert {"repomd.xml", "repomd.xml.asc", "primary.xml.gz", "filelists.xml.gz",
            "other.xml.gz"} <= kinds  # fmt: skip
    assert not any(p.endswith(".sqlite.bz2") for p in files)  # yum's copies: dnf reads the XML

    assert outcome.elsewhere == manifest["from_node_repositories"]

    again = fetch_bundle(plan_of(url, ("kilnprobe-tool", ""), ("chrony", "")), tmp_path / "b")
    assert again.fetched == [] and again.failed == []


def test_the_command_says_what_it_leaves_to_the_nodes_repositories(upstream, tmp_path, capsys):
    url, _ = upstream
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"kiln": "mirror-plan", **plan_of(url, ("chrony", ""))}))
    with pytest.raises(SystemExit) as exit_:
        main(["mirror", "fetch", str(plan), "--to", str(tmp_path / "b")])
    said = capsys.readouterr().err
    assert exit_.value.code == 0, said
    assert f"{PLATFORM}: 1 package(s) and requirement(s) no repository of the plan" in said
    assert "left to the nodes' own repositories: chrony" in said


def test_a_pin_takes_that_version_and_a_pin_no_repository_has_is_named(upstream, tmp_path):
    url, _ = upstream
    pinned = fetch_bundle(plan_of(url, ("kilnprobe-lib", "1.0*")), tmp_path / "one")
    assert pinned.failed == []
    manifest = json.loads((tmp_path / "one" / MANIFEST).read_text())
    assert manifest["packages"][PLATFORM] == {"kilnprobe-lib": "1.0-1"}

    gone = fetch_bundle(plan_of(url, ("kilnprobe-lib", "9.9*")), tmp_path / "two")
    assert gone.failed == [
        f"rpm kilnprobe-lib 9.9*: these repositories have 1.0-1, 1.2-1 ({PLATFORM})"
    ]


def test_a_pin_that_a_requirement_rules_out_is_named(upstream, tmp_path):
    url, _ = upstream
    outcome = fetch_bundle(plan_of(url, ("kilnprobe-lib", "1.0*"), ("kilnprobe-tool", "")),
                           tmp_path / "b")  # fmt: skip
    assert outcome.failed == [
        f"rpm requirement kilnprobe-lib >= 1.1: not met by kilnprobe-lib 1.0-1 ({PLATFORM})"
    ]


def test_an_unsigned_package_is_named_and_kept_out(upstream, tmp_path):
    url, _ = upstream
    outcome = fetch_bundle(plan_of(url, ("kilnprobe-unsigned", "")), tmp_path / "b")
    assert len(outcome.failed) == 1
    failure = outcome.failed[0]
    assert failure.startswith(f"rpm kilnprobe-unsigned 1.0-1 ({url}/repo/kilnprobe-unsigned-")
    assert "not signed by the repository's key" in failure
    manifest = json.loads((tmp_path / "b" / MANIFEST).read_text())
    assert not any(p.endswith(".rpm") for p in manifest["files"])
    assert not list((tmp_path / "b").rglob("*.rpm*"))


def test_an_index_changed_after_signing_is_refused(upstream, tmp_path):
    url, www = upstream
    repomd = www / "repo" / "repodata" / "repomd.xml"
    repomd.write_text(repomd.read_text().replace("<revision>", "<revision>1"))
    outcome = fetch_bundle(plan_of(url, ("kilnprobe-tool", "")), tmp_path / "b")
    assert outcome.failed[0].startswith(f"repository {url}/repo/ ({PLATFORM}): ")
    assert "signature does not verify" in outcome.failed[0]
    manifest = json.loads((tmp_path / "b" / MANIFEST).read_text())
    assert not any(p.endswith(".rpm") for p in manifest["files"])


def test_versions_order_as_rpm_orders_them():
    """rpmvercmp against rpm's own, on versions as packages spell them and on random ones
    (digits, letters, separators, ~ and ^; never '-', which no version may hold)."""
    rng = random.Random(3)
    spelled = ["1.0", "1.0a", "1.0~rc1", "1.0^git1", "1.0.0", "2.0.1b", "5.5p1", "24.05.8",
               "550.54.15", "2.25.1", "1.0~", "1.0^", "1..0", "01.002", "1.a", "a.1", "1_0",
               "~", "^", "10", "9", "1.0~rc1^git", "1.0~~", "b", "a", "1+cuda12.8", "1.el9",
               "1.el9_4"]  # fmt: skip
    pairs = [(a, b) for a in spelled for b in spelled]
    alphabet = "0123456789abcz.~^_+"
    for _ in range(1500):
        pairs.append(tuple("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
                           for _ in range(2)))  # fmt: skip
    for start in range(0, len(pairs), 400):
        chunk = pairs[start : start + 400]
        body = " ".join(f"io.write(rpm.vercmp('{a}','{b}'),' ')" for a, b in chunk)
        said = _run("rpm", "--eval", "%{lua: " + body + "}").split()
        ours = [str(vercmp(a, b)) for a, b in chunk]
        assert ours == said, [(p, o, s) for p, o, s in zip(chunk, ours, said, strict=True)
                              if o != s][:5]  # fmt: skip


def test_an_empty_index_leaves_everything_to_the_node():
    found = resolve(RpmIndex(), [("slurm", "24.05.8*")], "x86_64")
    assert (found.packages, found.missing, found.elsewhere) == ([], [], ["slurm"])


@pytest.mark.skipif(shutil.which("dnf") is None, reason="dnf is not installed (make system-deps)")
def test_dnf_reads_the_served_bundle_with_its_checks_on(upstream, tmp_path):
    """The upstream repository is gone; dnf itself, with repo_gpgcheck and gpgcheck on and the
    repository's key, reads kiln's mirror of the bundle and downloads the packages from it."""
    url, www = upstream
    fetch_bundle(plan_of(url, ("kilnprobe-tool", "")), tmp_path / "b")
    shutil.rmtree(www / "repo")
    key = tmp_path / "b" / "127.0.0.1" / "RPM-GPG-KEY-kiln"
    with serving(tmp_path / "b") as (served, log):
        done = subprocess.run(
            ["dnf", "-y", "-q", "--disableplugin=local", "--releasever", "9",
             "--installroot", str(tmp_path / "root"), "--setopt=reposdir=/dev/null",
             f"--setopt=cachedir={tmp_path / 'cache'}",
             f"--repofrompath=kiln,{served}/127.0.0.1/repo/", "--setopt=kiln.gpgcheck=1",
             "--setopt=kiln.repo_gpgcheck=1", f"--setopt=kiln.gpgkey=file://{key}",
             "download", "--destdir", str(tmp_path / "got"), "kilnprobe-tool", "kilnprobe-lib"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    for agent in (tmp_path / "cache").rglob("pubring"):  # the agent dnf's key import started
        subprocess.run(["gpgconf", "--homedir", str(agent), "--kill", "gpg-agent"], check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "got").iterdir()) == [
        "kilnprobe-lib-1.2-1.noarch.rpm", "kilnprobe-tool-2.0-1.noarch.rpm"
    ]  # fmt: skip
    asked = [line.split() for line in log.getvalue().splitlines()]
    assert {status for *_, status in asked} == {"200"}, log.getvalue()  # all from the bundle
    assert {Path(path).name for _, _, _, path, _ in asked} >= {
        "repomd.xml", "repomd.xml.asc", "kilnprobe-tool-2.0-1.noarch.rpm"
    }  # fmt: skip
