"""Burn-in inside a declared image (kiln_burnin.container, #31): what validate refuses, the srun
options each runtime gets, the job scripts that carry them, the launcher and allreduce_launch.py
running the workloads in the image (against a stand-in srun), and the bundle configuration that
lets a step's ranks on two nodes reach each other. The whole run is on the sandbox
(tests/integration/test_burnin_container.py, `make test-burnin-container`)."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from pydantic import ValidationError

from kiln.burnin import jobs as J
from kiln.burnin.suites import resolve_suite
from kiln.burnin.workloads import workload_path
from kiln.examples import write_example
from kiln.inventory import load_cluster
from kiln.inventory.containers_spec import (
    HOST_FILES,
    ContainersSpec,
    pyxis_image,
    rootless_bundle_config,
)
from kiln.inventory.schema import BurninSpec

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "172.31.250.1:5055/kiln/burnin:1"
# What umoci 0.4.7 (Debian 13) writes as a bundle's config.json, recorded on a sandbox node
# (tests/fixtures/real/umoci/SOURCE.txt).
UMOCI_CONFIG = ROOT / "tests" / "fixtures" / "real" / "umoci" / "config-0.4.7-debian13.json"
PYXIS = {
    "enabled": True,
    "runtime": "pyxis",
    "enroot": {
        "version": "3.5.0",
        "packages": [{"url": "https://m.site/enroot_3.5.0-1_amd64.deb", "sha256": "a" * 64}],
    },
    "pyxis": {
        "version": "0.20.0",
        "source": {"url": "https://m.site/pyxis-0.20.0.tar.gz", "sha256": "b" * 64},
    },
}


def inventory(tmp_path: Path, containers: dict, image: str = IMAGE, gpus: bool = False) -> Path:
    """The sandbox's inventory (CPU nodes), or the example's (H100 nodes), with the settings."""
    root = tmp_path / "inv"
    if gpus:
        write_example(root, 2)
    else:
        shutil.copytree(ROOT / "inventories" / "sandbox", root)
    path = root / "group_vars" / "all.yml"
    settings = yaml.safe_load(path.read_text())
    settings["kiln_containers"] = containers
    settings["kiln_burnin"] = {**settings.get("kiln_burnin", {}), "container": image}
    path.write_text(yaml.safe_dump(settings, sort_keys=False))
    return root


def errors(root: Path) -> list[str]:
    return [f"{f.message} | {f.hint}" for f in load_cluster(root).errors]


# --- what validate takes and refuses ----------------------------------------------------------


def test_the_container_must_be_an_image_reference():
    with pytest.raises(ValidationError, match="not an image reference with its registry"):
        BurninSpec.model_validate({"container": "pytorch"})
    assert BurninSpec.model_validate({"container": IMAGE}).container == IMAGE


@pytest.mark.parametrize(
    ("containers", "gpus", "expected"),
    [
        ({"enabled": False}, False, "needs the containers stage"),
        ({"enabled": True, "images": []}, False, "is not one of kiln_containers.images"),
        ({"enabled": True, "images": [IMAGE]}, True, "kiln's OCI bundles carry no GPU devices"),
    ],
)
def test_a_burnin_image_the_nodes_cannot_run_is_refused(tmp_path, containers, gpus, expected):
    found = errors(inventory(tmp_path, containers, gpus=gpus))
    assert any(expected in e and "kiln_burnin.container" in e for e in found), found


def test_an_image_the_nodes_can_run_is_taken(tmp_path):
    assert errors(inventory(tmp_path / "oci", {"enabled": True, "images": [IMAGE]})) == []
    # pyxis: enroot pulls the image when the job starts, and brings the GPUs in
    assert not any(
        "kiln_burnin.container" in e
        for e in errors(inventory(tmp_path / "pyxis", PYXIS, gpus=True))
    )


# --- srun's options and the job scripts -------------------------------------------------------


def test_each_runtime_gets_its_srun_options():
    oci = J.burnin_container(IMAGE, ContainersSpec(enabled=True, images=[IMAGE]))
    assert oci == J.Container(
        IMAGE, ("--container=/var/lib/kiln/containers/172.31.250.1:5055/kiln/burnin/1",)
    )
    pyxis = J.burnin_container("nvcr.io/nvidia/pytorch:24.05-py3", ContainersSpec(**PYXIS))
    assert pyxis.srun_options == (
        "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
        "--no-container-mount-home",
    )
    assert pyxis_image("172.31.250.1:5055/kiln/burnin:1") == "172.31.250.1:5055#kiln/burnin:1"
    # behind a firewall pyxis pulls the mirror's copy (`kiln mirror serve` answers as a registry)
    mirrored = J.burnin_container(
        "nvcr.io/nvidia/pytorch:24.05-py3", ContainersSpec(**PYXIS), "http://mirror:8080/kiln"
    )
    assert (
        mirrored.srun_options[0] == "--container-image=mirror:8080#nvcr.io/nvidia/pytorch:24.05-py3"
    )
    assert J.burnin_container(None, ContainersSpec(**PYXIS)) is None


def test_the_job_scripts_carry_the_image_and_the_host_runs_the_rest():
    suite = resolve_suite(BurninSpec(), "quick")
    container = J.burnin_container(IMAGE, ContainersSpec(enabled=True, images=[IMAGE]))
    export = (
        "export KILN_BURNIN_CONTAINER="
        "--container=/var/lib/kiln/containers/172.31.250.1:5055/kiln/burnin/1  # " + IMAGE
    )
    node = J.node_job("RUN1", "res", suite, "n01", gpus=8, container=container)
    pair = J.allreduce_job("RUN1", "res", suite, "pair-r0-n01--n02", ["n01", "n02"], gpus=0,
                           container=container)  # fmt: skip
    for spec in (node, pair):
        lines = spec.script.splitlines()
        assert export in lines
        # the GEMM and the all-reduce go through the launcher, which reads the variable
        assert lines.index(export) < min(
            i for i, line in enumerate(lines) if "kiln-burnin " in line
        )
    plain = J.node_job("RUN1", "res", suite, "n01", gpus=8)
    assert "KILN_BURNIN_CONTAINER" not in plain.script


# --- the launcher and allreduce_launch.py in the image, against a stand-in srun -----------------

STAND_IN_SRUN = f"""#!{sys.executable}
# Each call: its arguments as one JSON line; prints what the workload would.
import json, os, sys
with open(os.environ["SRUN_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
sys.stdout.write(os.environ["SRUN_PRINTS"])
"""


def stand_in(tmp_path: Path, prints: str) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    srun = bindir / "srun"
    srun.write_text(STAND_IN_SRUN)
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    return {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "SRUN_LOG": str(tmp_path / "srun.log"),
        "SRUN_PRINTS": prints,
        "KILN_BURNIN_CONTAINER": "--container=/b/img --container-writable",
        "SLURM_CPUS_ON_NODE": "16",
    }


def srun_calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "srun.log").read_text().splitlines()]


def launcher_script(tmp_path: Path) -> Path:
    """The burnin role's launcher as the role renders it, the workloads where the role puts them."""
    prefix = tmp_path / "prefix"
    (prefix / "workloads").mkdir(parents=True)
    shutil.copy(workload_path("gemm"), prefix / "workloads" / "gemm.py")
    template = ROOT / "playbooks" / "roles" / "burnin" / "templates" / "kiln-burnin.j2"
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["quote"] = shlex.quote
    text = env.from_string(template.read_text()).render(
        ansible_managed="managed", burnin_runtime="system", __burnin_workloads=["gemm", "ibbw"],
        burnin_nccl_tests="/opt/nccl", burnin_environment={"NCCL_DEBUG": "WARN"},
        __burnin_python="/usr/bin/false", burnin_prefix=str(prefix),
    )  # fmt: skip
    script = prefix / "kiln-burnin"
    script.write_text(text)
    return script


def test_the_launcher_runs_the_gemm_as_a_step_in_the_image(tmp_path):
    env = stand_in(tmp_path, '{"kind": "gemm"}')
    script = launcher_script(tmp_path)
    proc = subprocess.run(["sh", str(script), "gemm", "--seconds", "10"], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == '{"kind": "gemm"}'
    (call,) = srun_calls(tmp_path)
    assert call == [
        "--nodes=1", "--ntasks=1", "--cpus-per-task=16", "--container=/b/img",
        "--container-writable", "python3", "-c", workload_path("gemm").read_text().rstrip("\n"),
        "--seconds", "10",
    ]  # fmt: skip
    # without the variable the host's runtime runs it (here /usr/bin/false: it fails)
    del env["KILN_BURNIN_CONTAINER"]
    proc = subprocess.run(["sh", str(script), "gemm"], env=env, capture_output=True, check=False)
    assert proc.returncode != 0 and len(srun_calls(tmp_path)) == 1


def launch_module():
    spec = importlib.util.spec_from_file_location("kiln_launch", workload_path("allreduce_launch"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_job_script_the_launcher_and_allreduce_launch_name_one_variable():
    template = ROOT / "playbooks" / "roles" / "burnin" / "templates" / "kiln-burnin.j2"
    assert launch_module().CONTAINER_ENV == J.Container.ENV == "KILN_BURNIN_CONTAINER"
    assert f"${{{J.Container.ENV}:-}}" in template.read_text()


def test_the_all_reduce_runs_in_the_image_with_its_torch(tmp_path):
    mod = launch_module()
    args = mod.arguments(["--backend", "nccl", "--implementation", "nccl-tests"])
    with pytest.raises(SystemExit, match="nccl-tests is the host's"):
        mod.choose(args, {mod.CONTAINER_ENV: "--container=/b/img"})
    args = mod.arguments(["--backend", "nccl"])  # auto: even where nccl-tests is built
    binary = tmp_path / "all_reduce_perf"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    env = {mod.CONTAINER_ENV: "--container=/b/img", mod.NCCL_TESTS_ENV: str(binary)}
    assert mod.choose(args, env) == ("torch", None)

    doc = {"kind": "allreduce", "rows": [], "hosts": ["n01", "n02"]}
    env = stand_in(tmp_path, json.dumps(doc))
    proc = subprocess.run(
        [sys.executable, str(workload_path("allreduce_launch")), "--ntasks-per-node", "1",
         "--backend", "gloo", "--ring"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (call,) = srun_calls(tmp_path)
    assert call[:6] == [
        "--kill-on-bad-exit=1", "--ntasks-per-node=1", "--container=/b/img",
        "--container-writable", "python3", "-c",
    ]  # fmt: skip
    assert call[6] == workload_path("allreduce").read_text()
    assert call[7:9] == ["--iters", "20"] and call[-1] == "--ring"
    printed = json.loads(proc.stdout)
    assert printed["container"] == ["--container=/b/img", "--container-writable"]
    assert printed["implementation"] == "torch" and "fallback" not in printed
    size = len(workload_path("allreduce").read_text())
    assert f"[{size} characters]" in proc.stderr  # the text is not in the log


# --- the bundle a step runs from ------------------------------------------------------------


def test_a_step_in_a_bundle_shares_the_nodes_network_name_and_host_names():
    config = json.loads(UMOCI_CONFIG.read_text())
    kinds = [ns["type"] for ns in config["linux"]["namespaces"]]
    assert "network" in kinds and "uts" in kinds  # what umoci writes: a step cut off
    fixed = rootless_bundle_config(config)
    assert [ns["type"] for ns in fixed["linux"]["namespaces"]] == [
        k for k in kinds if k not in ("network", "uts")
    ]
    assert "hostname" not in fixed
    mounts = {m["destination"]: m for m in fixed["mounts"]}
    assert mounts["/sys"]["type"] == "bind" and mounts["/sys"]["source"] == "/sys"
    assert "ro" in mounts["/sys"]["options"]
    for path in HOST_FILES:
        assert mounts[path] == {"destination": path, "type": "bind", "source": path,
                                "options": ["bind", "nosuid", "nodev", "ro"]}  # fmt: skip
    assert not any(o.startswith("gid=") for m in fixed["mounts"] for o in m.get("options", []))
    assert fixed["process"] == config["process"] and fixed["root"] == config["root"]
    # the role applies it at every run: a second time changes nothing
    assert rootless_bundle_config(fixed) == fixed
