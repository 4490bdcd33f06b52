"""The whole flow with no route out (#30): `make test-airgapped`, outside `make test` (CI's time).

The sandbox inventory's plan (`kiln mirror plan`), fetched from Debian's archive into a bundle
(`kiln mirror fetch`, kept between runs in KILN_BUNDLE_CACHE: a re-run fetches what is new),
a second sandbox beside the default one (KILN_SANDBOX=airgap) on a Docker network with no route
out and a mirror container serving the bundle (`kiln sandbox up --mirror`), then a full
`kiln provision` and a quick `kiln burnin` that must pass. The mirror's access log holds what
the nodes fetched: every request answered from the bundle (no 404), nothing asked for that the
bundle, built from the plan, does not hold, and every package the bundle holds fetched by a node:
the bundle is resolved against the nodes' dpkg status (`kiln mirror fetch --installed`), and the
nodes run the bare node image, nothing beyond the base installed or cached in it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote

import pytest

from kiln.sandbox import image

from .conftest import REPO, run_docker, run_kiln

pytestmark = pytest.mark.airgapped
INSTANCE = "airgap"
CACHE = Path(os.environ.get("KILN_BUNDLE_CACHE", "~/.cache/kiln/airgap-bundle")).expanduser()


@pytest.fixture(scope="module")
def airgapped(tmp_path_factory):
    """(env, inventory) of an air-gapped sandbox, brought down afterwards."""
    home = tmp_path_factory.mktemp("kiln-airgap")
    env = {**os.environ, "KILN_SANDBOX": INSTANCE, "KILN_HOME": str(home)}
    planned = run_kiln("mirror", "plan", str(REPO / "inventories" / "sandbox"), "--json",
                       env=env, timeout=300)  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    (home / "plan.json").write_text(planned.stdout)
    # What the nodes have before a provision: the bare node image's own dpkg status.
    bare = image.ensure_image(lambda *_: None, bare=True).tag
    status = run_docker("run", "--rm", "--entrypoint", "cat", bare, "/var/lib/dpkg/status")
    (home / "status").write_text(status.stdout)
    platform = json.loads(planned.stdout)["platforms"][0]
    fetched = run_kiln("mirror", "fetch", str(home / "plan.json"), "--to", str(CACHE),
                       "--installed", f"{platform}={home / 'status'}",
                       env=env, timeout=1800)  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr[-4000:]
    run_kiln("sandbox", "down", env=env, timeout=300)  # a sandbox of that name left by a killed run
    up = run_kiln("sandbox", "up", "--nodes", "2", "--mirror", str(CACHE), env=env, timeout=1200)
    assert up.returncode == 0, up.stderr[-4000:]
    try:
        yield env, Path(up.stdout.strip())
    finally:
        run_kiln("sandbox", "down", env=env, timeout=300)


def test_provision_and_burnin_pass_with_no_route_out(airgapped):
    env, inventory = airgapped
    probe = "import urllib.request as u; u.urlopen('http://deb.debian.org/', timeout=5)"
    egress = run_docker("exec", f"{INSTANCE}-node01", "python3", "-c", probe, check=False)
    assert egress.returncode != 0, "a node reached Debian's archive: the sandbox has a route out"

    provision = run_kiln("provision", str(inventory), "--yes", "--json", env=env, timeout=2400)
    assert provision.returncode == 0, provision.stderr[-6000:]
    with (inventory / "group_vars" / "all.yml").open("a", encoding="utf-8") as handle:
        handle.write("\nkiln_burnin:\n  gemm_tflops_floor: 0.0001\n")  # a loaded CI machine
    burnin = run_kiln("burnin", str(inventory), "--suite", "quick", "--seconds", "5", "--json",
                      env=env, timeout=1200)  # fmt: skip
    assert burnin.returncode == 0, burnin.stderr[-6000:]
    assert json.loads(burnin.stdout)["passed"] is True

    log = run_docker("logs", f"{INSTANCE}-mirror").stdout
    asked = [line.split()[3:5] for line in log.splitlines() if line.count(" ") == 4]
    held = set(json.loads((CACHE / "bundle.json").read_text())["files"])
    assert asked, "the nodes fetched nothing from the mirror"
    assert [a for a in asked if a[1] not in ("200", "304")] == []  # 304: apt's If-Modified-Since
    fetched = {unquote(path).lstrip("/") for path, _ in asked}
    assert fetched <= held  # nothing fetched that the plan's bundle does not hold

    # Nothing held that was not needed: the bundle, resolved against the nodes' dpkg status
    # (kiln mirror fetch --installed), holds exactly the packages the nodes fetched.
    held_debs = {p for p in held if p.endswith(".deb")}
    fetched_debs = {p for p in fetched if p.endswith(".deb")}
    print(f"packages: {len(held_debs)} in the bundle, {len(fetched_debs)} fetched by the nodes")
    assert held_debs - fetched_debs == set(), "held in the bundle, never fetched"
