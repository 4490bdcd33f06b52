"""kiln_containers runtime pyxis (#31): enroot from its packages and pyxis built against the
installed Slurm, each download checked against a declared SHA-256. The binaries cannot be
fetched on these machines (NVIDIA publishes them on GitHub): what is checked here is what can
be without them: the declaration, the files the role writes (rendered from its templates with
its defaults), the downloads `kiln mirror plan` lists with their checksums, the hosts the stage
touches, and the slurm stage's upgrade treating the pyxis kiln built as one it rebuilds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from kiln.artifacts.plan import mirror_plan
from kiln.artifacts.scope import environment
from kiln.inventory import load_cluster
from kiln.inventory.containers_spec import ContainersSpec
from kiln.plan import PlanOptions, make_plan
from local_playbook import run_playbook
from role_defaults import render_role_defaults

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "playbooks" / "roles" / "slurm_pyxis"
ENROOT_URL = "https://github.com/NVIDIA/enroot/releases/download/v3.5.0/enroot_3.5.0-1_amd64.deb"
CAPS_URL = ENROOT_URL.replace("enroot_3.5.0", "enroot+caps_3.5.0")
PYXIS_URL = "https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.20.0.tar.gz"
SUM_A, SUM_B, SUM_C = "a" * 64, "b" * 64, "c" * 64
PYXIS = {
    "enabled": True,
    "runtime": "pyxis",
    "enroot": {
        "version": "3.5.0",
        "packages": [{"url": ENROOT_URL, "sha256": SUM_A}, {"url": CAPS_URL, "sha256": SUM_B}],
    },
    "pyxis": {"version": "0.20.0", "source": {"url": PYXIS_URL, "sha256": SUM_C}},
}


def sandbox_with(tmp_path: Path, containers: dict) -> Path:
    root = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "sandbox", root)
    path = root / "group_vars" / "all.yml"
    settings = yaml.safe_load(path.read_text())
    settings["kiln_containers"] = containers
    path.write_text(yaml.safe_dump(settings, sort_keys=False))
    return root


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"enroot": None}, "runtime pyxis needs enroot"),
        ({"pyxis": {"version": "0.20.0", "source": {"url": PYXIS_URL, "sha256": "abc"}}},
         "String should match pattern"),
        ({"pyxis": {"version": "0.21.0", "source": {"url": PYXIS_URL, "sha256": SUM_C}}},
         "is not pyxis 0.21.0's source"),
        ({"enroot": {"version": "3.5.0", "packages": [{"url": PYXIS_URL, "sha256": SUM_A}]}},
         "is not a .deb or .rpm"),
        ({"enroot": {"version": "3.4.1", "packages": [{"url": ENROOT_URL, "sha256": SUM_A}]}},
         "is not enroot 3.4.1's package"),
        ({"enroot": {"version": "3.5.0", "packages": []}}, "at least 1 item"),
        ({"runtime": "oci"}, "enroot and pyxis are set but runtime is oci"),
    ],
)  # fmt: skip
def test_a_pyxis_declaration_kiln_cannot_carry_out_is_refused(change, message):
    with pytest.raises(ValidationError, match=message):
        ContainersSpec.model_validate({**PYXIS, **change})


def test_validate_accepts_it_and_the_stage_touches_every_slurm_host(tmp_path):
    result = load_cluster(sandbox_with(tmp_path, PYXIS))
    assert result.ok, [f.message for f in result.errors]
    stage = next(
        s for s in make_plan(result.cluster, PlanOptions()).stages if s.name == "containers"
    )
    book = yaml.safe_load((ROOT / "playbooks" / "containers.yml").read_text())
    assert [play["hosts"] for play in book] == ["kiln_compute", "kiln_controllers:kiln_compute"]
    assert set(stage.hosts) == {node.name for node in result.cluster.nodes}


def test_the_mirror_plan_lists_each_download_with_its_checksum(tmp_path):
    cluster = load_cluster(sandbox_with(tmp_path, PYXIS)).cluster
    files = {
        (a.source, a.checksum)
        for a in mirror_plan(cluster).artifacts
        if a.kind == "file" and a.role == "slurm_pyxis"
    }
    assert files == {
        (ENROOT_URL, f"sha256:{SUM_A}"),
        (CAPS_URL, f"sha256:{SUM_B}"),
        (PYXIS_URL, f"sha256:{SUM_C}"),
    }
    headers = [a for a in mirror_plan(cluster).artifacts if a.name == "libslurm-dev"]
    assert [a.version for a in headers] == ["24.11.5*"]  # the installed Slurm's exact version


def render(template: str, values: dict) -> str:
    env = environment()
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    keys = [k for k in defaults if k != "slurm_pyxis_slurm_version"]
    scope = render_role_defaults("slurm_pyxis", values, keys)
    scope.update(yaml.safe_load((ROLE / "vars" / "main.yml").read_text()))
    scope["ansible_managed"] = "Ansible managed"
    scope["slurm_pyxis_slurm_version"] = "24.11.5"
    text = (ROLE / "templates" / template).read_text()
    for _ in range(3):  # the role's vars refer to one another, as Ansible resolves them
        text = env.from_string(text).render(scope)
        scope = {k: env.from_string(v).render(scope) if isinstance(v, str) else v
                 for k, v in scope.items()}  # fmt: skip
    return text


def test_enroot_runs_on_tmpfs_and_caches_on_local_disk():
    conf = render("enroot.conf.j2", {"kiln_containers": PYXIS})
    lines = [line for line in conf.splitlines() if line and not line.startswith("#")]
    assert lines[:3] == [
        "ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)",
        "ENROOT_DATA_PATH /run/enroot/data/user-$(id -u)",
        "ENROOT_CACHE_PATH /var/lib/enroot/cache/group-$(id -g)",
    ]
    assert "ENROOT_CONFIG_PATH" not in conf  # no site login: each user's own
    login = {**PYXIS, "login": {"registry": "nvcr.io", "username": "$oauthtoken"}}
    with_login = render("enroot.conf.j2", {"kiln_containers": login})
    assert "ENROOT_CONFIG_PATH /etc/enroot/site" in with_login
    netrc = render("credentials.j2", {"kiln_containers": login, "kiln_registry_password": "k"})
    assert netrc.strip() == "machine nvcr.io login $oauthtoken password k"
    assert "ENROOT_ALLOW_HTTP" not in conf
    # a plain-HTTP mirror (kiln mirror serve): enroot may pull the burn-in image's copy from it
    mirrored = render(
        "enroot.conf.j2", {"kiln_containers": PYXIS, "kiln_mirror": {"url": "http://m:8080/k"}}
    )
    assert "ENROOT_ALLOW_HTTP y" in mirrored.splitlines()


def test_pyxis_is_required_from_where_kiln_builds_it():
    conf = render("pyxis.conf.j2", {"kiln_containers": PYXIS})
    assert conf.splitlines()[-1] == (
        "required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis"
    )
    assert "built by kiln against Slurm 24.11.5" in conf


@pytest.mark.local
def test_the_slurm_upgrade_rebuilds_the_pyxis_kiln_built_instead_of_refusing(tmp_path):
    built = tmp_path / "spank-built"
    built.mkdir()
    plugin = "/usr/local/lib/slurm/spank_pyxis.so"
    (built / "pyxis").write_text(f"0.20.0 24.11.5 {SUM_C}\n{plugin}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = ROOT / "tests" / "fixtures" / "real" / "slurm-version" / "slurmd-V_debian13_24.11.5.txt"
    (bin_dir / "slurmd").write_text(f"#!/bin/sh\ncat {real}\n")
    (bin_dir / "slurmd").chmod(0o755)
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "plugstack.conf").write_text(f"include {etc}/plugstack.conf.d/*.conf\n")
    (etc / "plugstack.conf.d").mkdir()
    (etc / "plugstack.conf.d" / "pyxis.conf").write_text(f"required {plugin} runtime_path=/x\n")
    book = tmp_path / "play.yml"
    book.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: true\n  gather_subset: [min]\n"
        "  tasks:\n"
        "    - ansible.builtin.include_role: {name: slurm_common, tasks_from: upgrade_check}\n"
        f"    - ansible.builtin.copy: {{content: '{{{{ slurm_common_upgrade | to_json }}}}', "
        f"dest: {tmp_path / 'upgrade.json'}, mode: '0644'}}\n"
    )
    extra = {
        "kiln_versions": {"slurm": "26.05.5"},
        "kiln_slurm": {"source": "repository",
                       "repository": {"url": "http://r/", "key_url": "http://r/k"}},
        "kiln_os": "debian-13",
        "slurm_common_config_dir": str(etc),
        "__slurm_common_spank_built_dir": str(built),
    }  # fmt: skip
    proc = run_playbook(book, extra, bin_dir)
    assert proc.returncode == 0, proc.stdout[-3000:]
    upgrade = json.loads((tmp_path / "upgrade.json").read_text())
    assert upgrade["kiln_built"] is True and upgrade["spank_packages"] == []
