"""An air-gapped node installs what the plan names from a bundle, through kiln's mirror (#30).

`kiln mirror plan` of the sandbox inventory, kept to the base role's packages (small enough for
every CI run), `kiln mirror fetch` from Debian's archive into a bundle, and two containers of
the sandbox's bare Debian image on a Docker network with no route out: one serves the bundle
with kiln's own server (`python3 -m kiln.artifacts.serve`, the standard library alone); on the
other the base role's archive tasks (real Ansible, through the docker connection as molecule
reaches its containers) point apt at the mirror with kiln_mirror set, set the node's own sources
aside and refresh the lists (Debian's own signed index, checked by the node's own keyring), and
converge on a second run; then the packages install. Every request the node made was answered
from the bundle: no 404, nothing asked for that the bundle does not hold.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
import uuid
from urllib.parse import unquote

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
- name: The base role's archive sources, as provision runs them with kiln_mirror set
  hosts: all
  gather_facts: true
  gather_subset: [min]
  tasks:
    - name: Point apt at the mirror
      ansible.builtin.include_role:
        name: base
        tasks_from: archive
"""


def _ansible(node: str, mirror_url: str, work) -> subprocess.CompletedProcess:
    """The base role's archive.yml on the node through Ansible's docker connection (as molecule
    reaches its containers), with the inventory values a provision would pass."""
    (work / "archive.yml").write_text(PLAYBOOK)
    extra = {"kiln_os": chosen().os, "kiln_arch": "x86_64", "kiln_mirror": {"url": mirror_url}}
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"),
           "ANSIBLE_FILTER_PLUGINS": str(REPO / "playbooks" / "filter_plugins"),
           "ANSIBLE_NOCOLOR": "1", "PYTHONPATH": str(REPO / "cli")}  # fmt: skip
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", f"{node},", "-c", "community.docker.docker",
            "-e", json.dumps(extra), str(work / "archive.yml")]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=False)


def test_a_node_with_no_route_out_installs_the_plan_from_the_bundle(bundle, tmp_path):
    root, packages = bundle
    image = base_tag(chosen())
    tag = uuid.uuid4().hex[:8]
    network, mirror, node = f"kiln-offline-{tag}", f"kiln-mirror-{tag}", f"kiln-airgap-{tag}"
    _docker("network", "create", "--internal", network)
    try:
        serve = ["python3", "-m", "kiln.artifacts.serve", "/srv/bundle", "--port", "8080"]
        _docker("run", "-d", "--rm", "--name", mirror, "--network", network,
                "-v", f"{root}:/srv/bundle:ro", "-v", f"{REPO / 'cli'}:/kiln:ro",
                "-e", "PYTHONPATH=/kiln", image, *serve)  # fmt: skip
        _docker("run", "-d", "--rm", "--name", node, "--network", network, image,
                "sleep", "infinity")  # fmt: skip
        probe = "import urllib.request as u; u.urlopen('http://deb.debian.org/', timeout=5)"
        egress = _docker("exec", node, "python3", "-c", probe, check=False)
        assert egress.returncode != 0, "the node reached Debian's archive: it has a route out"
        first = _ansible(node, f"http://{mirror}:8080", tmp_path)
        second = _ansible(node, f"http://{mirror}:8080", tmp_path)
        install = _docker("exec", "-e", "DEBIAN_FRONTEND=noninteractive", node,
                          "apt-get", "install", "-y", "-q", *packages, timeout=600,
                          check=False)  # fmt: skip
        query = _docker("exec", node, "dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\\n",
                        *packages, check=False)  # fmt: skip
        aside = _docker("exec", node, "ls", "/etc/apt", check=False).stdout.split()
        log = _docker("logs", mirror, check=False).stdout
    finally:
        _docker("rm", "-f", mirror, node, check=False)
        _docker("network", "rm", network, check=False)
    assert first.returncode == 0, first.stdout[-4000:]
    assert "changed=3" in first.stdout.splitlines()[-2], first.stdout[
        -2000:
    ]  # write, set aside, update
    assert "changed=0" in second.stdout.splitlines()[-2], second.stdout[-2000:]  # converged
    assert "sources.list.kiln-disabled" in aside and "sources.list" not in aside
    assert install.returncode == 0, f"{install.stdout[-3000:]}\n{install.stderr[-3000:]}"
    installed = dict(line.split() for line in query.stdout.splitlines())
    assert installed == {name: "ii" for name in packages}
    requests = [line.split() for line in log.splitlines() if line.count(" ") == 4]
    asked = [(path, status) for _, _, _, path, status in requests]
    held = set(json.loads((root / "bundle.json").read_text())["files"])
    assert asked, log
    assert [a for a in asked if a[1] not in ("200", "304")] == []  # 304: apt's If-Modified-Since
    assert {unquote(path).lstrip("/") for path, _ in asked} <= held  # apt quotes + and ~
    assert any(path.endswith(".deb") for path, _ in asked)
