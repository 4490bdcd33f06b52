"""Containers in jobs (#31): kiln_containers as validate reads it, where an image's bundle lies,
the pinned pull, and the runtime configuration a rootless crun under Slurm accepts. The stage
itself runs on the sandbox (tests/integration/test_containers.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from kiln.artifacts.plan import mirror_plan
from kiln.inventory import load_cluster
from kiln.inventory.containers_spec import (
    ContainersSpec,
    bundle_path,
    image_pinned,
    image_registry,
    mirrored_image,
    rootless_bundle_config,
)
from kiln.plan import PlanOptions, make_plan

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32


def sandbox_copy(tmp_path: Path, slurm: str, containers: dict) -> Path:
    root = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "sandbox", root)
    path = root / "group_vars" / "all.yml"
    settings = yaml.safe_load(path.read_text())
    settings["kiln_versions"]["slurm"] = slurm
    if slurm.startswith("22.05"):
        settings["kiln_os"] = "debian-12"
        settings["kiln_versions"].update(driver_branch=550, cuda="12.4", nccl="2.21.5")
    settings["kiln_containers"] = containers
    path.write_text(yaml.safe_dump(settings, sort_keys=False))
    return root


@pytest.mark.parametrize(
    ("reference", "where"),
    [
        ("nvcr.io/nvidia/pytorch:24.05-py3", "/b/nvcr.io/nvidia/pytorch/24.05-py3"),
        ("172.31.250.1:5055/kiln/probe:1", "/b/172.31.250.1:5055/kiln/probe/1"),
        (f"docker.io/library/ubuntu@{DIGEST}", f"/b/docker.io/library/ubuntu/sha256-{'ab' * 32}"),
    ],
)
def test_each_image_has_one_bundle_path(reference, where):
    assert bundle_path("/b", reference) == where


def test_a_pull_names_the_digest_the_registry_gave():
    assert image_registry("172.31.250.1:5055/kiln/probe:1") == "172.31.250.1:5055"
    assert image_pinned("nvcr.io/nvidia/pytorch:24.05-py3", DIGEST) == (
        f"nvcr.io/nvidia/pytorch@{DIGEST}"
    )
    with pytest.raises(ValueError, match="pinned to another digest"):
        image_pinned(f"nvcr.io/nvidia/pytorch@sha256:{'cd' * 32}", DIGEST)
    with pytest.raises(ValueError, match="cannot pin"):
        image_pinned("nvcr.io/nvidia/pytorch:24.05-py3", "latest")


def test_the_rootless_configuration_drops_group_ids_and_keeps_the_rest():
    # What `umoci unpack` writes for devpts (its default runtime configuration).
    devpts = {
        "destination": "/dev/pts",
        "type": "devpts",
        "source": "devpts",
        "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
    }
    config = {"ociVersion": "1.0.0", "process": {"args": ["sh"]}, "mounts": [devpts]}
    fixed = rootless_bundle_config(config)
    assert fixed["mounts"][0]["options"] == [
        "nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620",
    ]  # fmt: skip
    assert fixed["process"] == config["process"]
    assert json.loads(json.dumps(fixed))  # still a JSON document


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"images": ["pytorch:24.05"]}, "not an image reference with its registry"),
        ({"images": ["nvcr.io/nvidia/pytorch"]}, "not an image reference with its registry"),
        ({"runtime": "pyxis"}, "runtime pyxis needs enroot"),
        ({"runtime": "docker"}, "Input should be 'oci' or 'pyxis'"),
        ({"bundle_dir": "relative/dir"}, "must be an absolute path"),
        ({"insecure_registries": ["http://x:5000"]}, "is not a registry host"),
        ({"login": {"registry": "nvcr.io", "username": "a b"}}, "letters, digits"),
    ],
)
def test_a_declaration_kiln_cannot_carry_out_is_refused(declared, message):
    with pytest.raises(ValidationError, match=message):
        ContainersSpec.model_validate(declared)


def test_the_stage_is_planned_only_when_enabled(tmp_path):
    on = sandbox_copy(tmp_path / "on", "24.11", {"enabled": True, "images": []})
    off = sandbox_copy(tmp_path / "off", "24.11", {"enabled": False})
    stages = {
        name: [s.name for s in make_plan(load_cluster(root).cluster, PlanOptions()).stages]
        for name, root in (("on", on), ("off", off))
    }
    assert "containers" in stages["on"] and "containers" not in stages["off"]
    assert stages["on"].index("containers") == stages["on"].index("slurm") + 1


def test_oci_runtime_on_slurm_22_05_is_refused_with_the_reason(tmp_path):
    # oci.conf's MountSpoolDir and RunTimeEnvExclude, which the role writes, came with 23.02.
    root = sandbox_copy(tmp_path, "22.05", {"enabled": True, "runtime": "oci"})
    errors = [f.message for f in load_cluster(root).errors]
    assert any(
        "MountSpoolDir and RunTimeEnvExclude in oci.conf" in m and "needs Slurm 23.02" in m
        for m in errors
    ), errors
    root_ok = sandbox_copy(tmp_path / "ok", "24.11", {"enabled": True, "runtime": "oci"})
    assert load_cluster(root_ok).errors == []


def test_behind_a_mirror_the_pull_comes_from_its_copy_and_the_plan_lists_the_image(tmp_path):
    image = "nvcr.io/nvidia/pytorch:24.05-py3"
    assert mirrored_image(image, None) == image
    assert mirrored_image(image, "http://mirror.example:8080/kiln") == (
        "mirror.example:8080/nvcr.io/nvidia/pytorch:24.05-py3"
    )
    # The bundle keeps the declared name: users' job scripts do not change behind a mirror.
    assert bundle_path("/b", image) == "/b/nvcr.io/nvidia/pytorch/24.05-py3"

    root = sandbox_copy(tmp_path, "24.11", {"enabled": True, "images": [image]})
    planned = mirror_plan(load_cluster(root).cluster)
    lines = [(a.kind, a.name, a.version, a.where) for a in planned.artifacts if a.kind == "image"]
    assert lines == [("image", "nvcr.io/nvidia/pytorch", "24.05-py3", "kiln_containers.images")]
