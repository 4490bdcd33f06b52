"""The Slurm you declare is the Slurm you get (#28): the distribution table, validate's refusals
with file:line, the version the roles pin for the sandbox and example inventories, and the
slurm.conf features a release lacks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kiln.inventory import load_cluster
from kiln.inventory.context import InventoryContext, read_context
from kiln.inventory.findings import FindingCollector
from kiln.inventory.rules import slurm as rules
from kiln.profiles.slurm import (
    conf_problems,
    load_slurm,
    pin,
    pin_filter,
    release_of,
    source_problems,
)
from role_defaults import render_role_defaults

ROOT = Path(__file__).parent.parent.parent
ROLES = ROOT / "playbooks" / "roles"
HOSTS = """\
all:
  children:
    kiln_controllers:
      hosts:
        ctl01: {ansible_host: 10.0.0.1}
    kiln_compute:
      hosts:
        cpu01: {ansible_host: 10.0.1.1, kiln_gpu_model: none}
"""
REPOSITORY = (
    "kiln_slurm:\n  source: repository\n  repository:\n"
    "    url: https://repo.example.com/slurm\n    key_url: https://repo.example.com/key.asc\n"
)


def context(root: Path, group_vars: str, hosts: str = HOSTS) -> InventoryContext:
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(hosts)
    (root / "group_vars" / "all.yml").write_text(group_vars)
    ctx = read_context(root, FindingCollector())
    assert ctx is not None
    return ctx


def findings(rule, ctx: InventoryContext) -> list[tuple[str, str, str, str]]:
    out = FindingCollector()
    rule(ctx, out)
    return [(f.level, f.origin.display(ctx.raw.root), f.message, f.hint) for f in out.findings]


def test_the_table_knows_what_each_supported_release_ships():
    table = load_slurm()
    ships = {platform: entry.ships for platform, entry in table.distribution.items()}
    assert ships == {
        "debian-12": "22.05.8",
        "debian-13": "24.11.5",
        "ubuntu-22.04": "21.08.5",
        "ubuntu-24.04": "23.11.4",
        "rocky-9": "22.05.9",
        "rhel-9": "22.05.9",
    }
    assert all(entry.source.startswith("https://") for entry in table.distribution.values())
    introduced = {name: f.introduced for name, f in table.conf_features.items()}
    assert introduced == {
        "oci.conf/MountSpoolDir": "23.02",
        "topology/block": "24.05",
        "switch/nvidia_imex": "24.05",
    }


@pytest.mark.parametrize(
    ("declared", "source", "platform", "expected"),
    [
        ("22.05", "distribution", "debian-12", "22.05.8"),
        ("22.05.8", "distribution", "debian-12", "22.05.8"),
        (None, "distribution", "debian-13", "24.11.5"),
        ("23.11", "distribution", "ubuntu-24.04", "23.11.4"),
        ("22.05", "distribution", "rhel-9", "22.05.9"),
        ("24.05.8", "repository", "debian-12", "24.05.8"),
    ],
)
def test_the_pin_is_what_the_source_provides(declared, source, platform, expected):
    assert source_problems(declared, source, platform) == []
    assert pin(declared, source, platform) == expected


def test_a_version_the_source_lacks_is_refused_naming_what_it_ships():
    (problem,) = source_problems("24.05", "distribution", "debian-12")
    assert "debian-12 ships" in problem.message and "22.05.8" in problem.message
    assert "kiln_slurm.source: repository" in problem.hint
    (problem,) = source_problems("22.05.7", "distribution", "debian-12")  # exact: exactly
    assert "22.05.8" in problem.message
    (problem,) = source_problems("24.05", "repository", "debian-12")
    assert "exact version" in problem.message
    (problem,) = source_problems("22.05", "distribution", "sles-15")
    assert "does not know" in problem.message
    with pytest.raises(ValueError, match="22.05.8"):
        pin("24.05", "distribution", "debian-12")
    assert pin_filter(22.05, "distribution", None) == "22.05.8"  # Ansible's loose values
    assert release_of("24.05.8") == "24.05"


def test_validate_refuses_with_file_and_line(tmp_path):
    ctx = context(tmp_path / "a", 'kiln_versions:\n  slurm: "24.05"\n')
    ((level, where, message, hint),) = findings(rules.slurm_comes_from_its_source, ctx)
    assert (level, where) == ("error", "group_vars/all.yml:2")
    assert "Slurm 24.05 is not what debian-12 ships" in message and "22.05.8" in message
    assert "ctl01, cpu01" in message and "repository" in hint
    ctx = context(tmp_path / "b", 'kiln_versions:\n  slurm: "22.05"\n')
    assert findings(rules.slurm_comes_from_its_source, ctx) == []
    ctx = context(tmp_path / "c", 'kiln_versions:\n  slurm: "24.05.8"\n' + REPOSITORY)
    assert findings(rules.slurm_comes_from_its_source, ctx) == []
    ctx = context(tmp_path / "d", 'kiln_versions:\n  slurm: "24.05"\n' + REPOSITORY)
    ((_, where, message, _),) = findings(rules.slurm_comes_from_its_source, ctx)
    assert where == "group_vars/all.yml:2" and "exact version" in message


def test_each_platform_of_the_cluster_is_checked(tmp_path):
    hosts = HOSTS.replace("cpu01: {", "cpu01: {kiln_os: debian-13, ")
    ctx = context(tmp_path, 'kiln_versions:\n  slurm: "22.05"\n', hosts)
    ((_, _, message, _),) = findings(rules.slurm_comes_from_its_source, ctx)
    assert "debian-13 ships" in message and "24.11.5" in message and "(hosts: cpu01)" in message


def test_slurm_conf_options_the_release_lacks_are_refused(tmp_path):
    (name, problem), *_ = conf_problems("22.05", ["switch/nvidia_imex", "topology/block"])
    assert name == "switch/nvidia_imex"
    assert "SwitchType=switch/nvidia_imex needs Slurm 24.05" in problem.message
    assert [n for n, _ in conf_problems("23.11", ["switch/nvidia_imex", "topology/block"])] == [
        "switch/nvidia_imex",
        "topology/block",  # 23.11's block plugin reads BlockLevels, not the BlockSizes kiln writes
    ]
    assert conf_problems("24.11.5", ["switch/nvidia_imex", "topology/block"]) == []
    ctx = context(tmp_path / "a", 'kiln_versions:\n  slurm: "22.05"\nkiln_slurm:\n  imex: true\n')
    ((level, where, message, _),) = findings(rules.slurm_conf_fits_the_release, ctx)
    assert (level, where) == ("error", "group_vars/all.yml:4")
    assert "needs Slurm 24.05" in message and "Slurm is 22.05" in message
    group_vars = 'kiln_versions:\n  slurm: "24.05.8"\n' + REPOSITORY + "  imex: true\n"
    assert findings(rules.slurm_conf_fits_the_release, context(tmp_path / "b", group_vars)) == []
    # Undeclared: the distribution's own Slurm (Debian 12: 22.05) is what slurm.conf must fit.
    ctx = context(tmp_path / "c", "kiln_cluster_name: x\nkiln_slurm:\n  imex: true\n")
    assert len(findings(rules.slurm_conf_fits_the_release, ctx)) == 1


@pytest.mark.parametrize(
    ("inventory", "source", "version"),
    [("sandbox", "distribution", "24.11.5"), ("example-h100", "repository", "24.05.8")],
)
def test_the_roles_pin_the_declared_version_for_the_shipped_inventories(inventory, source, version):
    settings = yaml.safe_load((ROOT / "inventories" / inventory / "group_vars" / "all.yml").open())
    slurm = settings.get("kiln_slurm", {})
    assert slurm.get("source", "distribution") == source
    declared = settings["kiln_versions"]["slurm"]
    assert pin_filter(declared, slurm.get("source"), settings.get("kiln_os")) == version


def test_every_slurm_role_installs_through_the_pinned_and_held_install():
    defaults = (ROLES / "slurm_common" / "defaults" / "main.yml").read_text()
    assert "kiln_slurm_pin(slurm_common_source, kiln_os" in defaults
    for role in (
        "slurm_common/tasks/main.yml",
        "slurm_controller/tasks/main.yml",
        "slurm_node/tasks/main.yml",
        "slurm_dbd/tasks/enabled.yml",
    ):
        tasks = yaml.safe_load((ROLES / role).open())
        names = [
            t.get("ansible.builtin.include_tasks") or t.get("ansible.builtin.include_role")
            for t in tasks
        ]
        assert "install.yml" in names or {"name": "slurm_common", "tasks_from": "install"} in names
        packages = [str(t.get("ansible.builtin.package", {}).get("name", "")) for t in tasks]
        assert not any("_packages or __slurm_" in p for p in packages if "dbd" not in p), role
    dbd = yaml.safe_load((ROLES / "slurm_dbd" / "vars" / "Debian.yml").open())
    assert dbd["__slurm_dbd_packages"] == ["mariadb-server"]  # slurmdbd goes through install
    assert dbd["__slurm_dbd_slurm_packages"]["distribution"] == ["slurmdbd"]
    debian = (ROLES / "slurm_common" / "tasks" / "install-Debian.yml").read_text()
    assert "'=' ~ slurm_common_version ~ '*'" in debian and "selection: hold" in debian
    redhat = (ROLES / "slurm_common" / "tasks" / "install-RedHat.yml").read_text()
    assert "community.general.dnf_versionlock" in redhat
    for role, debs in (
        ("slurm_common", ["slurm-client"]),
        ("slurm_node", ["slurmd"]),
        ("slurm_controller", ["slurmctld"]),
    ):
        names = yaml.safe_load((ROLES / role / "vars" / "Debian.yml").open())
        (packages,) = [v for k, v in names.items() if k.endswith("_packages")]
        assert packages["distribution"] == debs  # the sandbox's packages, as before
        assert all(p.startswith("slurm-smd") for p in packages["repository"])


@pytest.mark.parametrize(
    ("source", "packages", "package_set", "node_packages"),
    [
        ("distribution", None, "distribution", ["slurmd"]),
        ("repository", None, "repository", ["slurm-smd-slurmd"]),
        ("repository", "schedmd", "repository", ["slurm-smd-slurmd"]),
        ("repository", "debian", "distribution", ["slurmd"]),  # a rebuild of Debian's packaging
    ],
)
def test_the_repository_says_how_its_debs_are_named(source, packages, package_set, node_packages):
    repository = {"url": "https://repo.example.com/slurm", "key_url": "https://k.example/k.asc"}
    if packages:
        repository["packages"] = packages
    kiln_slurm = {"source": source}
    if source == "repository":
        kiln_slurm["repository"] = repository
    rendered = render_role_defaults(
        "slurm_common",
        {"kiln_slurm": kiln_slurm},
        ["slurm_common_source", "slurm_common_repository", "slurm_common_package_set"],
    )
    assert rendered["slurm_common_package_set"] == package_set
    names = yaml.safe_load((ROLES / "slurm_node" / "vars" / "Debian.yml").open())
    assert names["__slurm_node_packages"][package_set] == node_packages


def test_a_pinned_key_fingerprint_is_forty_hex_digits(tmp_path):
    pinned = "    key_fingerprint: 3BF863CC\n"  # a short key id is not a fingerprint
    context(tmp_path, 'kiln_versions:\n  slurm: "24.11.5"\n' + REPOSITORY + pinned)
    (error,) = load_cluster(tmp_path).errors
    assert error.origin.display(tmp_path) == "group_vars/all.yml:8"
    assert "key_fingerprint" in (error.key or "") + error.message


def test_a_repository_names_its_packages_schedmd_or_debian_only(tmp_path):
    context(tmp_path, 'kiln_versions:\n  slurm: "24.11.5"\n' + REPOSITORY + "    packages: rpm\n")
    (error,) = load_cluster(tmp_path).errors
    assert error.origin.display(tmp_path) == "group_vars/all.yml:8"
    assert "'schedmd' or 'debian'" in error.message, error.message
