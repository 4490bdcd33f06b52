"""Offline mode in the inventory (#30): kiln_mirror as validate reads it, and every source the
inventory names outside the mirror refused with the file and line it is written at, on a copy
of the example H100 inventory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kiln.inventory import load_cluster
from kiln.inventory.mirror_spec import MirrorSpec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example-h100"
MIRROR = "http://mirror.example:8080/kiln"
# The example's Slurm repository (group_vars/all.yml) as the mirror holds it.
IN_MIRROR = f"{MIRROR}/packages.example.com/slurm"
OFFLINE = f"kiln_mirror:\n  url: {MIRROR}\n  offline: true\n"


def example(tmp_path: Path, all_vars: str = "", mirrored_slurm: bool = False) -> Path:
    """A copy of the example inventory with `all_vars` added to group_vars/all.yml; its Slurm
    repository moved into the mirror when `mirrored_slurm`."""
    root = tmp_path / "inv"
    shutil.copytree(EXAMPLE, root)
    path = root / "group_vars" / "all.yml"
    text = path.read_text()
    if mirrored_slurm:
        text = text.replace("https://packages.example.com/slurm", IN_MIRROR)
    path.write_text(text + all_vars)
    return root


def errors(root: Path) -> list[tuple[str, str, str | None]]:
    return [
        (f.origin.display(root), f.message, f.hint)
        for f in load_cluster(root).errors
        if f.origin is not None
    ]


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_offline_refuses_the_slurm_repository_outside_the_mirror_at_its_lines(tmp_path):
    root = example(tmp_path, OFFLINE)
    all_yml = root / "group_vars" / "all.yml"
    found = errors(root)
    assert [(where, message) for where, message, _ in found] == [
        (
            f"group_vars/all.yml:{line_of(all_yml, '    url:')}",
            "kiln_slurm.repository.url https://packages.example.com/slurm/debian12 is outside "
            f"the mirror {MIRROR} (kiln_mirror.offline is true)",
        ),
        (
            f"group_vars/all.yml:{line_of(all_yml, 'key_url:')}",
            "kiln_slurm.repository.key_url https://packages.example.com/slurm/key.asc is outside "
            f"the mirror {MIRROR} (kiln_mirror.offline is true)",
        ),
    ]
    assert found[0][2] == f"point it at the mirror's copy, {IN_MIRROR}/debian12"


def test_sources_inside_the_mirror_pass_and_the_cluster_keeps_the_setting(tmp_path):
    root = example(
        tmp_path,
        OFFLINE + f"nccl_tests_url: {MIRROR}/github.com/NVIDIA/nccl-tests/archive/v2.13.6.tar.gz\n",
        mirrored_slurm=True,
    )
    result = load_cluster(root)
    assert result.errors == []
    assert result.cluster.mirror == MirrorSpec(url=MIRROR, offline=True)


def test_a_source_set_for_a_group_or_a_host_is_refused_once_where_it_is_written(tmp_path):
    root = example(tmp_path, OFFLINE, mirrored_slurm=True)
    compute = root / "group_vars" / "kiln_compute.yml"
    compute.write_text(compute.read_text() + "burnin_pip_index_url: https://pypi.example/simple\n")
    (root / "host_vars").mkdir()
    host = root / "host_vars" / "gpu001.yml"
    host.write_text(
        "---\nnccl_tests_url: https://github.com/NVIDIA/nccl-tests/archive/v2.13.6.tar.gz\n"
    )
    found = errors(root)
    assert found[1][2] == (
        f"point it at the mirror's copy, {MIRROR}/github.com/NVIDIA/nccl-tests/archive/"
        "v2.13.6.tar.gz; or unset it (its default is fetched there)"
    )
    assert [(where, message) for where, message, _ in found] == [
        (
            f"group_vars/kiln_compute.yml:{line_of(compute, 'burnin_pip_index_url')}",
            f"burnin_pip_index_url https://pypi.example/simple is outside the mirror {MIRROR} "
            "(kiln_mirror.offline is true)",
        ),
        (
            "host_vars/gpu001.yml:2",
            "nccl_tests_url https://github.com/NVIDIA/nccl-tests/archive/v2.13.6.tar.gz is "
            f"outside the mirror {MIRROR} (kiln_mirror.offline is true)",
        ),
    ]


def test_a_mirror_that_is_not_offline_refuses_nothing(tmp_path):
    """Without offline: true kiln's own sources still come from the mirror, and what the
    inventory writes is used as written."""
    root = example(tmp_path, f"kiln_mirror:\n  url: {MIRROR}\n")
    assert load_cluster(root).errors == []


def test_a_host_in_an_outside_url_is_not_the_mirror(tmp_path):
    """Inside means under the mirror's root, not a URL that merely starts like it."""
    lookalike = f"nccl_tests_url: {MIRROR}-old/github.com/a.tar.gz\n"
    root = example(tmp_path, OFFLINE + lookalike, mirrored_slurm=True)
    assert [message.split(" is ")[0] for _, message, _ in errors(root)] == [
        f"nccl_tests_url {MIRROR}-old/github.com/a.tar.gz"
    ]


@pytest.mark.parametrize(
    ("setting", "key_line", "message"),
    [
        (
            "kiln_mirror:\n  offline: true\n",
            "kiln_mirror:",
            "kiln_mirror: Value error, offline: true needs url, the mirror every source is "
            "fetched from (got {'offline': True})",
        ),
        (
            f"kiln_mirror:\n  url: {MIRROR}\n  ofline: true\n",
            "ofline:",
            "unknown key kiln_mirror.ofline",
        ),
        (
            "kiln_mirror:\n  url: ftp://mirror.example/kiln\n",
            "url: ftp",
            "kiln_mirror.url: Value error, must be an http(s) URL such as "
            "http://mirror.example/kiln (got 'ftp://mirror.example/kiln')",
        ),
        (
            "kiln_mirror:\n  url: http://mirror.example/a b\n",
            "url: http://mirror.example/a b",
            "kiln_mirror.url: Value error, must be a plain URL: letters, digits and "
            ". _ ~ : / % + @ = - only (got 'http://mirror.example/a b')",
        ),
        (
            f"kiln_mirror:\n  url: {MIRROR}\n  offline: 'yes'\n",
            "offline: 'yes'",
            "kiln_mirror.offline is a string ('yes') where a boolean (true or false) belongs",
        ),
    ],
)
def test_a_malformed_kiln_mirror_is_a_finding_at_its_line(tmp_path, setting, key_line, message):
    root = example(tmp_path, setting, mirrored_slurm=True)
    all_yml = root / "group_vars" / "all.yml"
    assert [(where, found) for where, found, _ in errors(root)] == [
        (f"group_vars/all.yml:{line_of(all_yml, key_line)}", message)
    ]


def test_kiln_mirror_is_cluster_wide(tmp_path):
    root = example(tmp_path)
    compute = root / "group_vars" / "kiln_compute.yml"
    compute.write_text(compute.read_text() + OFFLINE)
    assert [message for _, message, _ in errors(root)] == [
        "kiln_mirror is cluster-wide but is set on group 'kiln_compute'"
    ]
