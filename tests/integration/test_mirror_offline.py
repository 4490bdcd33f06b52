"""An air-gapped node installs what the plan names from a bundle, through kiln's mirror (#30).

`kiln mirror plan` of the sandbox inventory, kept to the base role's packages (small enough for
every CI run), `kiln mirror fetch` from Debian's archive into a bundle, and two containers of
the sandbox's bare Debian image on a Docker network with no route out: one serves the bundle
with kiln's own server (`python3 -m kiln.artifacts.serve`, the standard library alone), the
other points apt at it, runs `apt-get update` (Debian's own signed index, checked by the
node's own keyring) and installs the packages. Every request the node made was answered from
the bundle: no 404, nothing asked for that the bundle does not hold.
"""

from __future__ import annotations

import json
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


def test_a_node_with_no_route_out_installs_the_plan_from_the_bundle(bundle):
    root, packages = bundle
    image = base_tag(chosen())
    suite = chosen().suite
    tag = uuid.uuid4().hex[:8]
    network, mirror = f"kiln-offline-{tag}", f"kiln-mirror-{tag}"
    _docker("network", "create", "--internal", network)
    try:
        serve = ["python3", "-m", "kiln.artifacts.serve", "/srv/bundle", "--port", "8080"]
        _docker("run", "-d", "--rm", "--name", mirror, "--network", network,
                "-v", f"{root}:/srv/bundle:ro", "-v", f"{REPO / 'cli'}:/kiln:ro",
                "-e", "PYTHONPATH=/kiln", image, *serve)  # fmt: skip
        base = f"http://{mirror}:8080/deb.debian.org/debian"
        security = f"http://{mirror}:8080/security.debian.org/debian-security"
        script = f"""
set -e
if python3 -c 'import urllib.request; urllib.request.urlopen("http://deb.debian.org/", timeout=5)'
then echo "EGRESS: the node reached Debian's archive"; exit 3; fi
rm -f /etc/apt/sources.list.d/*
cat > /etc/apt/sources.list <<EOF
deb {base} {suite} main
deb {base} {suite}-updates main
deb {security} {suite}-security main
EOF
for i in $(seq 20); do  # the mirror answers (404 for a name it does not hold) once it is up
  python3 -c 'import urllib.request as u; u.urlopen("http://{mirror}:8080/x")' 2>&1 \
    | grep -q 404 && break
  sleep 1
done
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y -q {" ".join(packages)}
dpkg-query -W -f='${{Package}} ${{db:Status-Abbrev}}\\n' {" ".join(packages)}
"""
        node = _docker("run", "--rm", "--network", network, image, "bash", "-c", script,
                       timeout=600, check=False)  # fmt: skip
        log = _docker("logs", mirror, check=False).stdout
    finally:
        _docker("rm", "-f", mirror, check=False)
        _docker("network", "rm", network, check=False)
    assert node.returncode == 0, f"{node.stdout[-3000:]}\n{node.stderr[-3000:]}"
    installed = dict(line.split() for line in node.stdout.splitlines()[-len(packages) :])
    assert installed == {name: "ii" for name in packages}
    requests = [line.split() for line in log.splitlines() if line.count(" ") == 4]
    asked = [(path, status) for _, _, _, path, status in requests if path != "/x"]
    held = set(json.loads((root / "bundle.json").read_text())["files"])
    assert asked, log
    assert [a for a in asked if a[1] != "200"] == []
    assert {unquote(path).lstrip("/") for path, _ in asked} <= held  # apt quotes + and ~
    assert any(path.endswith(".deb") for path, _ in asked)
