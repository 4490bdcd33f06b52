"""Slurm from a site's repository (kiln_slurm.source: repository), on a sandbox of its own.

A repository container on the sandbox's network serves Debian's own Slurm packages rebuilt with a
site suffix on their version (tests/integration/files/site_slurm_repo.py), signed, as a flat apt
repository. The inventory declares the exact upstream version (kiln_versions.slurm: 24.11.5 on
Debian 13) from that repository; Debian's archive carries the same upstream version without the
suffix, so the version installed says which of the two apt took. Every Slurm host gets the site's
build, held; each daemon says the declared version; a second provision changes nothing.

Its own sandbox instance (KILN_SANDBOX=krepo: a controller and one node), so the shared sandbox
keeps the distribution's Slurm the other tests expect; removed at the end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .own_sandbox import own_sandbox, serve_repository

pytestmark = pytest.mark.upgrade  # a sandbox of its own: `make test-slurm-upgrade`

KILN = str(Path(sys.executable).parent / "kiln")
INSTANCE = "krepo"
CTL, NODE = f"{INSTANCE}-ctl", f"{INSTANCE}-node01"
SUFFIX = "+site1"
SCRIPT = Path(__file__).parent / "files" / "site_slurm_repo.py"


def docker(*argv: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", *argv], capture_output=True, text=True, check=check, timeout=timeout
    )


def kiln(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KILN, *args], capture_output=True, text=True, env=env, timeout=1800, check=False
    )


@pytest.fixture(scope="module")
def site_sandbox(tmp_path_factory):
    with own_sandbox(INSTANCE, 1, tmp_path_factory.mktemp("krepo-home")) as (env, inventory):
        yield env, inventory


@pytest.fixture(scope="module")
def site_repository(site_sandbox):
    """(url, the site build's version, its key's fingerprint): the repository container, built
    and serving."""
    url, printed = serve_repository(INSTANCE, SCRIPT, SUFFIX)
    version, fingerprint = printed[-1].split()
    return url, version, fingerprint


def site_inventory(inventory: Path, copy: Path, url: str, upstream: str, fingerprint: str) -> Path:
    """A copy of the sandbox's inventory taking Slurm `upstream` from the site's repository."""
    shutil.copytree(inventory, copy)
    settings_file = copy / "group_vars" / "all.yml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["kiln_versions"]["slurm"] = upstream
    settings["kiln_slurm"]["source"] = "repository"
    settings["kiln_slurm"]["repository"] = {
        "url": url,
        "key_url": f"{url}key.asc",
        "key_fingerprint": fingerprint,
        "packages": "debian",
    }
    settings_file.write_text("---\n" + yaml.safe_dump(settings, sort_keys=False))
    return copy


@pytest.fixture(scope="module")
def provisioned(site_sandbox, site_repository, tmp_path_factory):
    env, inventory = site_sandbox
    url, site_version, fingerprint = site_repository
    upstream = site_version.split("-")[0]
    copy = tmp_path_factory.mktemp("krepo-inventory") / "inventory"
    site_inventory(inventory, copy, url, upstream, fingerprint)
    first = kiln("provision", str(copy), "--yes", "--json", env=env)
    assert first.returncode == 0, first.stderr[-4000:]
    return env, copy, upstream, site_version


def test_every_slurm_host_runs_the_site_build_at_the_declared_version_held(provisioned):
    _env, _inventory, upstream, site_version = provisioned
    hosts = [(CTL, ["slurmctld", "slurm-client"]), (NODE, ["slurmd", "slurm-client"])]
    for host, packages in hosts:
        installed = docker("exec", host, "dpkg-query", "-W", "-f", "${Package} ${Version}\n",
                           *packages).stdout.split("\n")  # fmt: skip
        assert sorted(filter(None, installed)) == sorted(f"{p} {site_version}" for p in packages)
        held = docker("exec", host, "apt-mark", "showhold").stdout.split()
        assert set(packages) <= set(held), (host, held)
        daemon = "slurmctld" if host == CTL else "slurmd"
        said = docker("exec", host, daemon, "-V").stdout.split()
        assert said[1] == upstream, (host, said)


def test_a_second_provision_changes_nothing(provisioned):
    env, inventory, _upstream, _site_version = provisioned
    # --full: every task runs again (the repository, the pin, the hold), not a drift-aware skip
    again = kiln("provision", str(inventory), "--yes", "--json", "--full", env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout)
    changed = [
        (entry["name"], host)
        for entry in summary["stages"]
        for host, result in entry["hosts"].items()
        if result["changed"]
    ]
    assert summary["changed"] == 0, changed


def test_a_key_with_another_fingerprint_is_refused_before_it_is_trusted(
    provisioned, site_sandbox, site_repository, tmp_path
):
    env, inventory = site_sandbox
    url, site_version, _fingerprint = site_repository
    wrong = "0123456789ABCDEF0123456789ABCDEF01234567"
    copy = site_inventory(inventory, tmp_path / "inventory", url, site_version.split("-")[0], wrong)
    before = docker("exec", NODE, "sha256sum", "/etc/apt/keyrings/kiln-slurm.asc").stdout
    refused = kiln("provision", str(copy), "--yes", "--stages", "slurm", "--full", env=env)
    assert refused.returncode != 0
    assert f"not the pinned {wrong}" in refused.stderr, refused.stderr[-3000:]
    assert docker("exec", NODE, "sha256sum", "/etc/apt/keyrings/kiln-slurm.asc").stdout == before
