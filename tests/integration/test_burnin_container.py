"""Burn-in inside a declared image (kiln_burnin.container, #31), on the sandbox: the path users'
jobs take. The image is the sandbox's own node image (Debian 13 with its python3-torch), pushed
to a registry on this machine (Debian's docker-registry) and unpacked on both nodes by the
containers stage (runtime oci: Slurm's OCI support with crun). `kiln burnin` then runs every
GEMM and the all-reduce across both nodes as job steps in that image: the ranks on two nodes
reach each other only because the bundles share the nodes' network (rootless_bundle_config).

Outside `make test` (pushing and unpacking a 1.5 GB image on two nodes takes minutes of CI's
time): `make test-burnin-container`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kiln.inventory.containers_spec import bundle_path
from kiln.records.documents import RunDocuments
from kiln.sandbox import config
from kiln.sandbox.image import image_tag
from registry_server import running_registry

from .conftest import run_docker

pytestmark = [
    pytest.mark.burnin_image,
    pytest.mark.skipif(
        shutil.which("docker-registry") is None,
        reason="needs docker-registry (make system-deps)",
    ),
]

KILN = str(Path(sys.executable).parent / "kiln")
NODES = [config.node_name(1), config.node_name(2)]


def kiln(inventory: Path, state: Path, *args: str) -> dict:
    proc = subprocess.run(
        [KILN, *args, str(inventory), "--yes", "--json"],
        capture_output=True, text=True, timeout=1800, check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture
def images_in_a_registry(sandbox, tmp_path):
    """The node image in a registry the nodes reach, and the same image without torch: the
    references the nodes pull."""
    with running_registry(tmp_path, "0.0.0.0") as port:
        pushed = f"127.0.0.1:{port}/kiln/burnin"
        run_docker("tag", image_tag(), f"{pushed}:1")
        (tmp_path / "Dockerfile").write_text(
            f"FROM {image_tag()}\nRUN rm -r /usr/lib/python3/dist-packages/torch\n"
        )
        run_docker("build", "-q", "-t", f"{pushed}:no-torch", str(tmp_path), timeout=900)
        for tag in ("1", "no-torch"):
            run_docker("push", f"{pushed}:{tag}", timeout=900)
            run_docker("image", "rm", f"{pushed}:{tag}")
        pull = f"{config.GATEWAY}:{port}/kiln/burnin"
        yield f"{pull}:1", f"{pull}:no-torch"


def burnin(inventory: Path, state: Path, *extra: str) -> tuple[int, dict]:
    run = subprocess.run(
        [KILN, "burnin", str(inventory), "--suite", "quick", "--seconds", "5", "--json", *extra],
        capture_output=True, text=True, timeout=1200, check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )  # fmt: skip
    assert run.stdout.strip(), run.stderr[-3000:]
    return run.returncode, json.loads(run.stdout)


def with_image(inventory: Path, images: list[str], image: str) -> None:
    settings_path = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(settings_path.read_text())
    settings["kiln_containers"] = {
        "enabled": True,
        "runtime": "oci",
        "images": images,
        "insecure_registries": [image.split("/")[0]],
    }
    # a loaded 2-core machine: the floor is not what this test is about
    settings["kiln_burnin"] = {"container": image, "gemm_tflops_floor": 0.0001}
    settings_path.write_text(yaml.safe_dump(settings, sort_keys=False))


def test_burnin_runs_its_workloads_in_the_declared_image(
    provisioned_sandbox, images_in_a_registry, tmp_path
):
    image, no_torch = images_in_a_registry
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    state = provisioned_sandbox.state
    with_image(inventory, [image, no_torch], image)

    kiln(inventory, state, "provision", "--stages", "containers")
    bundle = bundle_path("/var/lib/kiln/containers", image)
    for node in NODES:
        configured = json.loads(run_docker("exec", node, "cat", f"{bundle}/config.json").stdout)
        kinds = [ns["type"] for ns in configured["linux"]["namespaces"]]
        assert "network" not in kinds and "uts" not in kinds, kinds

    code, outcome = burnin(inventory, state)
    assert code == 0 and outcome["passed"] is True, outcome
    record = state / "runs" / outcome["run_id"]
    assert json.loads((record / "run.json").read_text())["container"] == image
    ring = json.loads(RunDocuments(record).text("allreduce/fabric-ring.json"))
    assert ring["container"] == [f"--container={bundle}"]
    assert sorted(ring["hosts"]) == NODES  # both nodes' ranks, each seeing its node's name
    for node in NODES:
        (log,) = (record / "logs" / node).glob("*-node-*.log")
        assert f"gemm in the image: srun --container={bundle}" in log.read_text()

    # The same nodes, an image without torch: now every GEMM and the ring fail, so they ran in
    # the image and not on the host's runtime, which has torch (judged only: nothing drained).
    with_image(inventory, [image, no_torch], no_torch)
    code, outcome = burnin(inventory, state, "--no-drain")
    assert code != 0 and outcome["passed"] is False
    report = json.loads((state / "runs" / outcome["run_id"] / "report.json").read_text())
    failed = {(v["node"], v["check"]) for v in report["verdicts"] if not v["passed"]}
    assert {(node, "result") for node in NODES} <= failed, failed  # no GEMM result at all
    for node in NODES:
        log = next((state / "runs" / outcome["run_id"] / "logs" / node).glob("*-node-*.log"))
        assert "No module named 'torch'" in log.read_text()
    states = run_docker("exec", config.CONTROLLER, "sinfo", "-h", "-N", "-o", "%N %t").stdout
    assert "drain" not in states, states
