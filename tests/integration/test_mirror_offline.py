"""An air-gapped node installs what the plan names from a bundle, through kiln's mirror (#30).

`kiln mirror plan` of the sandbox inventory, kept to the base role's packages (small enough for
every CI run), `kiln mirror fetch` from Debian's archive into a bundle, and two containers of
the sandbox's bare Debian image on a Docker network with no route out: one serves the bundle
with kiln's own server (`python3 -m kiln.artifacts.serve`, the standard library alone); on the
other the base role's archive tasks (real Ansible, through the docker connection as molecule
reaches its containers) point apt at the mirror with kiln_mirror set, set the node's own sources
aside and refresh the lists (Debian's own signed index, checked by the node's own keyring), and
converge on a second run; then the role's package task installs them. Every request the node
made was answered from the bundle: no 404, nothing asked for that the bundle does not hold. A
package taken out of the mirror fails that one task at once, its message naming the package's
URL on the mirror.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

from kiln.sandbox.image import base_tag
from kiln.sandbox.releases import chosen

from .conftest import REPO, VENV_BIN

pytestmark = pytest.mark.integration
ROLE = "base"


def _docker(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          check=check)  # fmt: skip


def _kiln(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "kiln"), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def bundle(sandbox, tmp_path_factory):
    """The base role's packages of the sandbox's plan, fetched: (bundle dir, packages)."""
    try:
        release = f"https://deb.debian.org/debian/dists/{chosen().suite}/InRelease"
        urllib.request.urlopen(release, timeout=20)  # noqa: S310
    except OSError as exc:
        pytest.skip(f"Debian's archive is not reachable from here ({exc}): nothing to fetch")
    work = tmp_path_factory.mktemp("kiln-mirror")
    planned = _kiln("mirror", "plan", str(sandbox.inventory), "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    plan["artifacts"] = [
        a for a in plan["artifacts"]
        if a["kind"] == "repository" or (a["kind"] == "deb" and a["role"] == ROLE)
    ]  # fmt: skip
    packages = sorted(a["name"] for a in plan["artifacts"] if a["kind"] == "deb")
    assert {"chrony", "rsync", "ethtool"} <= set(packages)
    (work / "plan.json").write_text(json.dumps(plan))
    fetched = _kiln("mirror", "fetch", str(work / "plan.json"), "--to", str(work / "bundle"))
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    return work / "bundle", packages


PLAYBOOK = """
- name: The base role's tasks, as provision runs them with kiln_mirror set
  hosts: all
  gather_facts: true
  gather_subset: [min]
  tasks:
    - name: Run the base role's {tasks}
      ansible.builtin.include_role:
        name: base
        tasks_from: {tasks}
"""


def _play(node: str, tasks: str, extra: dict, work: Path) -> subprocess.CompletedProcess:
    """One of the base role's task files on the node through Ansible's docker connection (as
    molecule reaches its containers), with the inventory values a provision would pass."""
    (work / f"{tasks}.yml").write_text(PLAYBOOK.format(tasks=tasks))
    extra = {"kiln_os": chosen().os, "kiln_arch": "x86_64", **extra}
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"),
           "ANSIBLE_FILTER_PLUGINS": str(REPO / "playbooks" / "filter_plugins"),
           "ANSIBLE_NOCOLOR": "1", "PYTHONPATH": str(REPO / "cli")}  # fmt: skip
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", f"{node},", "-c", "community.docker.docker",
            "-e", json.dumps(extra), str(work / f"{tasks}.yml")]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=False)


def _recap(result: subprocess.CompletedProcess) -> str:
    return next(line for line in reversed(result.stdout.splitlines()) if "ok=" in line)


def _mirror(name: str, network: str, root: Path, image: str) -> None:
    serve = ["python3", "-m", "kiln.artifacts.serve", "/srv/bundle", "--port", "8080"]
    _docker("run", "-d", "--rm", "--name", name, "--network", network,
            "-v", f"{root}:/srv/bundle:ro", "-v", f"{REPO / 'cli'}:/kiln:ro",
            "-e", "PYTHONPATH=/kiln", image, *serve)  # fmt: skip


def _node(name: str, network: str, image: str) -> None:
    _docker("run", "-d", "--rm", "--name", name, "--network", network, image, "sleep", "infinity")


def test_a_node_with_no_route_out_installs_the_plan_from_the_bundle(bundle, tmp_path):
    root, packages = bundle
    image = base_tag(chosen())
    tag = uuid.uuid4().hex[:8]
    network, mirror, node = f"kiln-offline-{tag}", f"kiln-mirror-{tag}", f"kiln-airgap-{tag}"
    mirrored = {"kiln_mirror": {"url": f"http://{mirror}:8080"}, "base_packages": packages}
    _docker("network", "create", "--internal", network)
    try:
        _mirror(mirror, network, root, image)
        _node(node, network, image)
        probe = "import urllib.request as u; u.urlopen('http://deb.debian.org/', timeout=5)"
        egress = _docker("exec", node, "python3", "-c", probe, check=False)
        assert egress.returncode != 0, "the node reached Debian's archive: it has a route out"
        first = _play(node, "archive", mirrored, tmp_path)
        second = _play(node, "archive", mirrored, tmp_path)
        install = _play(node, "packages-Debian", mirrored, tmp_path)
        query = _docker("exec", node, "dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\\n",
                        *packages, check=False)  # fmt: skip
        aside = _docker("exec", node, "ls", "/etc/apt", check=False).stdout.split()
        log = _docker("logs", mirror, check=False).stdout
    finally:
        _docker("rm", "-f", mirror, node, check=False)
        _docker("network", "rm", network, check=False)
    assert first.returncode == 0, first.stdout[-4000:]
    assert "changed=3" in _recap(first), first.stdout[-2000:]  # written, set aside, refreshed
    assert "changed=0" in _recap(second), second.stdout[-2000:]  # converged
    assert "sources.list.kiln-disabled" in aside and "sources.list" not in aside
    assert install.returncode == 0, install.stdout[-4000:]
    installed = dict(line.split() for line in query.stdout.splitlines())
    assert installed == {name: "ii" for name in packages}
    requests = [line.split() for line in log.splitlines() if line.count(" ") == 4]
    asked = [(path, status) for _, _, _, path, status in requests]
    held = set(json.loads((root / "bundle.json").read_text())["files"])
    assert asked, log
    assert [a for a in asked if a[1] not in ("200", "304")] == []  # 304: apt's If-Modified-Since
    assert {unquote(path).lstrip("/") for path, _ in asked} <= held  # apt quotes + and ~
    assert any(path.endswith(".deb") for path, _ in asked)


def test_an_artifact_missing_from_the_mirror_fails_its_task_at_once_naming_it(bundle, tmp_path):
    root, packages = bundle
    lacking = tmp_path / "bundle"  # the same bundle, hard-linked, without ethtool's package
    subprocess.run(["cp", "-al", str(root), str(lacking)], check=True, timeout=120)
    manifest = json.loads((lacking / "bundle.json").read_text())
    (removed,) = [path for path in manifest["files"] if "/ethtool_" in path]
    del manifest["files"][removed]
    (lacking / "bundle.json").write_text(json.dumps(manifest))
    image = base_tag(chosen())
    tag = uuid.uuid4().hex[:8]
    network, mirror, node = f"kiln-offline-{tag}", f"kiln-mirror-{tag}", f"kiln-airgap-{tag}"
    mirrored = {"kiln_mirror": {"url": f"http://{mirror}:8080"}, "base_packages": packages}
    _docker("network", "create", "--internal", network)
    try:
        _mirror(mirror, network, lacking, image)
        _node(node, network, image)
        assert _play(node, "archive", mirrored, tmp_path).returncode == 0
        start = time.monotonic()
        install = _play(node, "packages-Debian", mirrored, tmp_path)
        seconds = time.monotonic() - start
    finally:
        _docker("rm", "-f", mirror, node, check=False)
        _docker("network", "rm", network, check=False)
    assert install.returncode != 0
    assert "failed=1" in _recap(install)
    failed = [line for line in install.stdout.splitlines() if line.startswith("fatal:")]
    assert len(failed) == 1  # one task, once
    name = removed.rsplit("/", 1)[-1]
    assert f"http://{mirror}:8080/" in failed[0]  # the mirror, and the package it lacks
    assert name in failed[0] or quote(name) in failed[0] or name.replace("%3a", ":") in failed[0]
    assert seconds < 300, f"the failure took {seconds:.0f} s"
