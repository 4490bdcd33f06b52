"""Containers in jobs on the sandbox (#31): the containers stage installs crun, skopeo and umoci
from Debian's packages, writes oci.conf and unpacks an image from a registry as an OCI bundle on
both nodes; a user's `srun --container` runs a step inside it on both nodes; a second provision
changes nothing; an image pushed again under the same tag is unpacked anew while a job running
from the old one keeps it and finishes, and the old one goes once nothing runs from it.

The registry is the CNCF distribution registry (Debian's docker-registry) on this machine,
reached by the nodes at the sandbox network's gateway; the image is a busybox (Debian's
busybox-static, fetched with apt-get download) with the directories a real image has.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from kiln.inventory.containers_spec import bundle_path
from kiln.sandbox import config
from registry_server import running_registry

from .conftest import run_docker

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("docker-registry") is None or shutil.which("apt-get") is None,
        reason="needs docker-registry (make system-deps) and apt-get (a Debian host)",
    ),
]

KILN = str(Path(sys.executable).parent / "kiln")
NODES = [config.node_name(1), config.node_name(2)]
BUNDLES = "/var/lib/kiln/containers"


def _push(tmp_path: Path, busybox: Path, text: str, image: str) -> None:
    """An image as a real one is laid out (/bin/sh, /etc, /proc, ...) with /probe.txt = text,
    pushed to the registry as `image`."""
    root = tmp_path / "rootfs"
    shutil.rmtree(root, ignore_errors=True)
    for directory in ("bin", "etc", "proc", "sys", "dev", "run", "tmp", "var"):
        (root / directory).mkdir(parents=True)
    shutil.copy2(busybox, root / "bin" / "busybox")
    (root / "bin" / "sh").symlink_to("busybox")
    (root / "probe.txt").write_text(text)
    with tarfile.open(tmp_path / "rootfs.tar", "w") as tar:
        tar.add(root, arcname=".")
    run_docker("import", str(tmp_path / "rootfs.tar"), image)
    run_docker("push", image)
    run_docker("image", "rm", image)


@pytest.fixture
def registry(tmp_path):
    """A registry on every address of this machine: (the name the nodes pull from, the one
    Docker pushes to here) and busybox-static's binary."""
    debs = tmp_path / "debs"
    debs.mkdir()
    subprocess.run(["apt-get", "download", "busybox-static"], cwd=debs, check=True,
                   capture_output=True)  # fmt: skip
    (deb,) = debs.glob("busybox-static_*.deb")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(debs / "x")], check=True)
    with running_registry(tmp_path, "0.0.0.0") as port:
        yield f"{config.GATEWAY}:{port}", f"127.0.0.1:{port}", debs / "x" / "bin" / "busybox"


def provision(inventory: Path, state: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [KILN, "provision", str(inventory), "--stages", "containers", "--yes", "--json", *extra],
        capture_output=True, text=True, timeout=1200, check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def in_container(user: str, bundle: str) -> list[str]:
    step = f"srun -N2 --ntasks-per-node=1 --container={bundle} /bin/busybox cat /probe.txt"
    ran = run_docker(
        "exec", config.CONTROLLER, "su", "-", user, "-c", f"timeout 120 {step}", check=False
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return ran.stdout.splitlines()


def submit_in_container(user: str, bundle: str, node: str) -> str:
    """A batch job on `node` whose step runs in the bundle for a while, then prints the file."""
    step = f"srun --container={bundle} /bin/busybox sh -c 'sleep 75; cat /probe.txt'"
    ran = run_docker(
        "exec", config.CONTROLLER, "su", "-", user, "-c",
        f"sbatch --parsable -N1 -w {node} -o job-%j.out --wrap \"{step}\"",
    )  # fmt: skip
    return ran.stdout.strip().split(";")[0]


def wait_for(job: str, state: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        shown = run_docker("exec", config.CONTROLLER, "scontrol", "show", "job", job).stdout
        if f"JobState={state}" in shown:
            return
        assert time.monotonic() < deadline, shown
        time.sleep(2)


def test_a_users_job_step_runs_inside_an_image_from_a_registry_on_both_nodes(
    provisioned_sandbox, login_on_every_node, registry, tmp_path
):
    pull_from, push_to, busybox = registry
    image = f"{pull_from}/kiln/probe:1"
    _push(tmp_path, busybox, "kiln container probe, first push\n", f"{push_to}/kiln/probe:1")

    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(group_vars.read_text())
    settings["kiln_containers"] = {
        "enabled": True,
        "images": [image],
        "insecure_registries": [pull_from],
    }
    group_vars.write_text(yaml.safe_dump(settings, sort_keys=False))
    state = tmp_path / "state"

    first = provision(inventory, state)
    assert first["stages"][0]["changed"] > 0
    bundle = bundle_path(BUNDLES, image)
    for node in NODES:
        marker = run_docker("exec", node, "cat", f"{bundle}/kiln-image").stdout.split()
        assert marker[0] == image and marker[1].startswith("sha256:")

    lines = in_container(login_on_every_node, bundle)
    assert lines == ["kiln container probe, first push"] * 2

    # Converged: every task again (--full), nothing changes, the image is not pulled again.
    again = provision(inventory, state, "--full")
    assert again["stages"][0]["changed"] == 0

    # The tag moves while a job runs from the old image: a full apply (the inventory is unchanged,
    # so a drift-aware one would skip the stage) asks the registry again, unpacks the new digest
    # and points the bundle path at it; the running job keeps its bundle and finishes with the
    # old file; the old digest goes at the next apply, once nothing runs from it.
    old_entry = run_docker("exec", NODES[0], "readlink", bundle).stdout.strip()
    job = submit_in_container(login_on_every_node, bundle, NODES[0])
    wait_for(job, "RUNNING")
    _push(tmp_path, busybox, "kiln container probe, second push\n", f"{push_to}/kiln/probe:1")
    assert provision(inventory, state, "--full")["stages"][0]["changed"] > 0
    assert run_docker("exec", NODES[0], "readlink", bundle).stdout.strip() != old_entry
    wait_for(job, "RUNNING", timeout=0)  # still: the apply did not touch it
    assert run_docker("exec", NODES[0], "test", "-d", old_entry, check=False).returncode == 0
    wait_for(job, "COMPLETED", timeout=180)
    output = run_docker("exec", NODES[0], "cat", f"/home/{login_on_every_node}/job-{job}.out")
    assert output.stdout.strip() == "kiln container probe, first push"
    assert in_container(login_on_every_node, bundle) == ["kiln container probe, second push"] * 2
    provision(inventory, state, "--full")
    assert run_docker("exec", NODES[0], "test", "-e", old_entry, check=False).returncode != 0
