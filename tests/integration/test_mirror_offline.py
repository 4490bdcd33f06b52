"""An air-gapped node installs what the plan names from a bundle, through kiln's mirror (#30).

`kiln mirror plan` of the sandbox inventory, kept to the base role's packages (small enough for
every CI run), `kiln mirror fetch` from Debian's archive into a bundle, and two containers of
the sandbox's bare Debian image on a Docker network with no route out: one serves the bundle
with kiln's own server (`python3 -m kiln.artifacts.serve`, the standard library alone); on the
other the base role's archive tasks (real Ansible, through the docker connection as molecule
reaches its containers) point apt at the mirror with kiln_mirror set, set the node's own sources
aside and refresh the lists (Debian's own signed index, checked by the node's own keyring), and
converge on a second run; then the role's package task installs them. Every request the node
made was answered from the bundle: no 404, nothing asked for that the bundle does not hold.
Pointed at a second mirror whose bundle lacks one package, the package task fails, once and at
once, its message naming the package's URL on that mirror.
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

from .conftest import REPO, VENV_BIN, run_docker, run_kiln

pytestmark = pytest.mark.integration
ROLE = "base"


@pytest.fixture(scope="module")
def bundle(sandbox, tmp_path_factory):
    """The base role's packages of the sandbox's plan, fetched: (bundle dir, packages)."""
    try:
        release = f"https://deb.debian.org/debian/dists/{chosen().suite}/InRelease"
        urllib.request.urlopen(release, timeout=20)  # noqa: S310
    except OSError as exc:
        pytest.skip(f"Debian's archive is not reachable from here ({exc}): nothing to fetch")
    work = tmp_path_factory.mktemp("kiln-mirror")
    planned = run_kiln("mirror", "plan", str(sandbox.inventory), "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    plan["artifacts"] = [
        a for a in plan["artifacts"]
        if a["kind"] == "repository" or (a["kind"] == "deb" and a["role"] == ROLE)
    ]  # fmt: skip
    packages = sorted(a["name"] for a in plan["artifacts"] if a["kind"] == "deb")
    assert {"chrony", "rsync", "ethtool"} <= set(packages)
    (work / "plan.json").write_text(json.dumps(plan))
    fetched = run_kiln("mirror", "fetch", str(work / "plan.json"), "--to", str(work / "bundle"))
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    return work / "bundle", packages


PLAYBOOK = """
- name: The base role's tasks, as provision runs them with kiln_mirror set
  hosts: all
  gather_facts: true
  gather_subset: [min]
  tasks:
{includes}
"""
INCLUDE = """    - name: Run the base role's {tasks}
      ansible.builtin.include_role:
        name: base
        tasks_from: {tasks}
"""


def _play(node: str, tasks: list[str], extra: dict, work: Path) -> subprocess.CompletedProcess:
    """The base role's task files, in order, on the node through Ansible's docker connection
    (as molecule reaches its containers), with the inventory values a provision would pass."""
    playbook = work / f"{'-'.join(tasks)}.yml"
    playbook.write_text(PLAYBOOK.format(includes="".join(INCLUDE.format(tasks=t) for t in tasks)))
    extra = {"kiln_os": chosen().os, "kiln_arch": "x86_64", **extra}
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"),
           "ANSIBLE_FILTER_PLUGINS": str(REPO / "playbooks" / "filter_plugins"),
           "ANSIBLE_NOCOLOR": "1", "PYTHONPATH": str(REPO / "cli")}  # fmt: skip
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", f"{node},", "-c", "community.docker.docker",
            "-e", json.dumps(extra), str(playbook)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=False)


def _recap(result: subprocess.CompletedProcess) -> str:
    return next(line for line in reversed(result.stdout.splitlines()) if "ok=" in line)


def _mirror(name: str, network: str, root: Path, image: str) -> None:
    serve = ["python3", "-m", "kiln.artifacts.serve", "/srv/bundle", "--port", "8080"]
    run_docker("run", "-d", "--rm", "--name", name, "--network", network,
               "-v", f"{root}:/srv/bundle:ro", "-v", f"{REPO / 'cli'}:/kiln:ro",
               "-e", "PYTHONPATH=/kiln", image, *serve)  # fmt: skip


def _without(root: Path, package: str, into: Path) -> str:
    """A hard-linked copy of the bundle whose manifest lacks `package`'s .deb (the mirror then
    refuses it); that .deb's bundle path."""
    subprocess.run(["cp", "-al", str(root), str(into)], check=True, timeout=120)
    manifest = json.loads((into / "bundle.json").read_text())
    (removed,) = [path for path in manifest["files"] if f"/{package}_" in path]
    del manifest["files"][removed]
    (into / "bundle.json").write_text(json.dumps(manifest))
    return removed


def test_a_node_with_no_route_out_installs_from_the_mirror_and_a_missing_one_fails_at_once(
    bundle, tmp_path
):
    root, packages = bundle
    image = base_tag(chosen())
    tag = uuid.uuid4().hex[:8]
    network, node = f"kiln-offline-{tag}", f"kiln-airgap-{tag}"
    whole, lacking = f"kiln-mirror-{tag}", f"kiln-mirror-lacking-{tag}"
    first_packages = [p for p in packages if p != "ethtool"]  # ethtool: for the second mirror
    removed = _without(root, "ethtool", tmp_path / "lacking")
    run_docker("network", "create", "--internal", network)
    try:
        _mirror(whole, network, root, image)
        _mirror(lacking, network, tmp_path / "lacking", image)
        run_docker("run", "-d", "--rm", "--name", node, "--network", network, image,
                   "sleep", "infinity")  # fmt: skip
        probe = "import urllib.request as u; u.urlopen('http://deb.debian.org/', timeout=5)"
        egress = run_docker("exec", node, "python3", "-c", probe, check=False)
        assert egress.returncode != 0, "the node reached Debian's archive: it has a route out"
        from_whole = {"kiln_mirror": {"url": f"http://{whole}:8080"}}
        install = _play(node, ["archive", "packages-Debian"],
                        {**from_whole, "base_packages": first_packages}, tmp_path)  # fmt: skip
        again = _play(node, ["archive"], from_whole, tmp_path)
        query = run_docker("exec", node, "dpkg-query", "-W",
                           "-f=${Package} ${db:Status-Abbrev}\\n", *first_packages,
                           check=False)  # fmt: skip
        aside = run_docker("exec", node, "ls", "/etc/apt", check=False).stdout.split()
        start = time.monotonic()
        missing = _play(node, ["archive", "packages-Debian"],
                        {"kiln_mirror": {"url": f"http://{lacking}:8080"},
                         "base_packages": packages}, tmp_path)  # fmt: skip
        seconds = time.monotonic() - start
        log = run_docker("logs", whole, check=False).stdout
    finally:
        run_docker("rm", "-f", whole, lacking, node, check=False)
        run_docker("network", "rm", network, check=False)

    assert install.returncode == 0, install.stdout[-4000:]
    assert "changed=0" in _recap(again), again.stdout[-2000:]  # the archive tasks converge
    assert "sources.list.kiln-disabled" in aside and "sources.list" not in aside
    installed = dict(line.split() for line in query.stdout.splitlines())
    assert installed == {name: "ii" for name in first_packages}
    requests = [line.split() for line in log.splitlines() if line.count(" ") == 4]
    asked = [(path, status) for _, _, _, path, status in requests]
    held = set(json.loads((root / "bundle.json").read_text())["files"])
    assert asked, log
    assert [a for a in asked if a[1] not in ("200", "304")] == []  # 304: apt's If-Modified-Since
    assert {unquote(path).lstrip("/") for path, _ in asked} <= held  # apt quotes + and ~
    assert any(path.endswith(".deb") for path, _ in asked)

    # A package the mirror lacks: the package task fails, once, at once, naming it and the mirror.
    assert missing.returncode != 0 and "failed=1" in _recap(missing)
    failed = [line for line in missing.stdout.splitlines() if line.startswith("fatal:")]
    assert len(failed) == 1, missing.stdout[-4000:]
    assert f"http://{lacking}:8080/" in failed[0]
    name = removed.rsplit("/", 1)[-1]
    assert name in failed[0] or quote(name) in failed[0], failed[0]
    assert seconds < 300, f"the failure took {seconds:.0f} s"
