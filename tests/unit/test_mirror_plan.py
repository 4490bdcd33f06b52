"""kiln mirror plan: every artifact a provision and a burn-in fetch, derived from the roles.

The example H100 inventory's plan is a golden file; a version changed in the inventory changes
exactly the lines it should; a package a role adds is a new line without any list to edit; a
name only the node can say stays in the plan with the reason.
"""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from kiln.app import main
from kiln.artifacts.plan import KERNEL, artifacts_of, mirror_plan, node_facts
from kiln.artifacts.roles import Fetch, walk_playbook
from kiln.artifacts.scope import HostLayers, Scope, Unresolved
from kiln.inventory import require_valid
from kiln.paths import PLAYBOOKS_DIR

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example-h100"
GOLDEN = ROOT / "tests" / "fixtures" / "golden" / "example-h100" / "mirror-plan.txt"


def run(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


def copy_example(tmp_path: Path, **all_vars) -> Path:
    """The example inventory with group_vars/all.yml keys replaced (nested dicts merged)."""
    inventory = tmp_path / "inventory"
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copytree(EXAMPLE, inventory)
    path = inventory / "group_vars" / "all.yml"
    data = yaml.safe_load(path.read_text())
    for key, value in all_vars.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return inventory


def test_example_plan_matches_golden(capsys):
    code, out, err = run(["mirror", "plan", str(EXAMPLE)], capsys)
    assert code == 0
    assert out == GOLDEN.read_text()
    assert "artifacts for debian-12/x86_64" in err


def test_json_plan_holds_the_same_artifacts(capsys):
    code, out, _ = run(["mirror", "plan", str(EXAMPLE), "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert (document["kiln"], document["schema_version"]) == ("mirror-plan", 1)
    by_name = {a["name"]: a for a in document["artifacts"]}
    assert len(document["artifacts"]) == len(GOLDEN.read_text().splitlines())
    nccl_tests = by_name["v2.13.6.tar.gz"]
    assert nccl_tests["source"] == "https://github.com/NVIDIA/nccl-tests/archive/v2.13.6.tar.gz"
    assert nccl_tests["checksum"].startswith("sha256:52b472a5")
    assert by_name["libnccl2"]["version"] == "2.25.1-1+cuda12.8"
    assert by_name["torch"]["kind"] == "wheel"


def _lines(inventory: Path) -> set[str]:
    return set(mirror_plan(require_valid(inventory)).lines())


def test_an_nccl_version_changes_exactly_the_nccl_lines(tmp_path):
    before = _lines(EXAMPLE)
    after = _lines(copy_example(tmp_path, kiln_versions={"nccl": "2.26.5"}))
    gone, new = sorted(before - after), sorted(after - before)
    assert [line.split("\t")[:3] for line in gone] == [
        ["deb", "libnccl-dev", "2.25.1-1+cuda12.8"], ["deb", "libnccl2", "2.25.1-1+cuda12.8"]
    ]  # fmt: skip
    assert [line.split("\t")[:3] for line in new] == [
        ["deb", "libnccl-dev", "2.26.5-1+cuda12.8"], ["deb", "libnccl2", "2.26.5-1+cuda12.8"]
    ]  # fmt: skip


def test_a_cuda_version_changes_the_cuda_packages_and_nccl_build(tmp_path):
    before = _lines(EXAMPLE)
    after = _lines(copy_example(
        tmp_path, kiln_versions={"cuda": "12.9", "driver_branch": 575, "nccl": "2.27.7"}
    ))  # fmt: skip
    changed = sorted(line.split("\t")[1] + " " + line.split("\t")[2] for line in after - before)
    assert changed == [
        "cuda-crt-12-9 -", "cuda-cudart-dev-12-9 -", "cuda-nvcc-12-9 -",
        "libnccl-dev 2.27.7-1+cuda12.9", "libnccl2 2.27.7-1+cuda12.9",
    ]  # fmt: skip
    assert len(before - after) == len(after - before)


def test_a_pinned_driver_is_its_exact_packages_and_a_new_pin_changes_only_them(tmp_path):
    pinned = _lines(copy_example(tmp_path / "a", nvidia_driver_version="570.133.20-1"))
    driver = sorted(line.split("\t")[1] + " " + line.split("\t")[2] for line in pinned
                    if "roles/nvidia_driver/" in line)  # fmt: skip
    assert driver == [
        "libnvidia-nscq-570 570.133.20-1", "nvidia-driver 570.133.20-1",
        "nvidia-fabricmanager-570 570.133.20-1", "nvidia-kernel-dkms 570.133.20-1",
        "nvidia-persistenced 570.133.20-1", "nvidia-smi 570.133.20-1",
    ]  # fmt: skip
    repinned = _lines(copy_example(tmp_path / "b", nvidia_driver_version="570.148.08-1"))
    assert {line.replace("570.133.20-1", "570.148.08-1") for line in pinned} == repinned


def test_a_rhel_node_gets_rpm_names_versions_and_repository(tmp_path):
    plan = mirror_plan(require_valid(copy_example(tmp_path, kiln_os="rhel-9")))
    assert plan.platforms == ["rhel-9/x86_64"]
    rpm = {(a.name, a.version) for a in plan.artifacts if a.kind == "rpm"}
    assert {("libnccl", "2.25.1-1+cuda12.8"), ("slurm", "24.05.8*"), ("chrony", "")} <= rpm
    assert not any(a.kind == "deb" for a in plan.artifacts)
    keys = [a for a in plan.artifacts if a.kind == "key" and a.name == "D42D0685.pub"]
    assert [k.checksum for k in keys] == ["610C7B14E068A878070DA4E99CD0A493D42D0685"]
    repositories = {a.source for a in plan.artifacts if a.kind == "repository"}
    assert "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/" in repositories


def test_a_package_a_role_adds_is_a_new_line(tmp_path):
    playbooks = tmp_path / "playbooks"
    shutil.copytree(PLAYBOOKS_DIR, playbooks, ignore=shutil.ignore_patterns("__pycache__"))
    tasks = playbooks / "roles" / "base" / "tasks" / "packages-Debian.yml"
    tasks.write_text(
        tasks.read_text()
        + "\n- name: A new tool\n  ansible.builtin.apt:\n    name: [new-tool]\n    state: present\n"
    )
    node = require_valid(EXAMPLE).compute[0]
    variables = {"kiln_os": "debian-12", "kiln_arch": "x86_64", **node.hostvars}
    found = walk_playbook(playbooks / "site.yml", set(node.groups), variables,
                          node_facts("debian-12", "x86_64"))  # fmt: skip
    added = [f for f in found if f.args.get("name") == ["new-tool"]]
    assert [f.where for f in added] == ["roles/base/tasks/packages-Debian.yml:11"]


def test_what_only_the_node_can_say_stays_in_the_plan_with_its_reason():
    plan = mirror_plan(require_valid(EXAMPLE))
    driver = [a for a in plan.artifacts if a.role == "nvidia_driver"]
    assert [(a.kind, a.name) for a in driver] == [("package", "?")]
    assert "what the node reports at play time" in driver[0].unresolved
    # A package named after the node's running kernel says so.
    fetch = Fetch("apt", {"name": [f"linux-headers-{KERNEL}"]}, "roles/x/tasks/main.yml:1", "x")
    (headers,) = artifacts_of(fetch, "debian-12/x86_64", "apt")
    assert headers.unresolved == f"needs {KERNEL}"


def test_a_condition_only_the_node_decides_is_kept_on_the_artifact():
    scope = Scope([{"x": "{{ registered.rc }}"}], HostLayers())
    with pytest.raises(Unresolved):
        scope.condition("x == 0")
    fetch = Fetch("apt", {"name": ["a"]}, "roles/x/tasks/main.yml:1", "x", ("x == 0",))
    (artifact,) = artifacts_of(fetch, "debian-12/x86_64", "apt")
    assert artifact.when == "x == 0"


def test_facts_of_an_os_release():
    facts = node_facts("ubuntu-24.04", "aarch64")["ansible_facts"]
    assert facts == {
        "distribution": "Ubuntu", "distribution_version": "24.04",
        "distribution_major_version": "24", "os_family": "Debian", "architecture": "aarch64",
        "kernel": KERNEL,
    }  # fmt: skip
    with pytest.raises(ValueError, match="not in kiln's platforms.yml"):
        node_facts("plan9", "x86_64")


def test_a_mirror_in_the_inventory_leaves_the_plan_s_sources_upstream(tmp_path):
    mirrored = _lines(copy_example(tmp_path, kiln_mirror={"url": "http://mirror.example:8080"}))
    assert mirrored == _lines(EXAMPLE)  # the bundle fetches from where things are published


def test_the_base_role_s_archive_sources_are_the_release_s_archive_under_the_mirror():
    from kiln.mirror.filters import archive_sources

    mirror = {"url": "http://mirror.example:8080/kiln/", "offline": True}
    assert archive_sources("debian-12", "x86_64", mirror) == [
        {"uris": ["http://mirror.example:8080/kiln/deb.debian.org/debian"],
         "suites": ["bookworm", "bookworm-updates"], "components": ["main"],
         "signed_by": "/usr/share/keyrings/debian-archive-keyring.gpg"},
        {"uris": ["http://mirror.example:8080/kiln/security.debian.org/debian-security"],
         "suites": ["bookworm-security"], "components": ["main"],
         "signed_by": "/usr/share/keyrings/debian-archive-keyring.gpg"},
    ]  # fmt: skip
    (ports,) = archive_sources("ubuntu-24.04", "aarch64", mirror)
    assert ports["uris"] == ["http://mirror.example:8080/kiln/ports.ubuntu.com/ubuntu-ports"]
    assert archive_sources("rhel-9", "x86_64", mirror) == []  # dnf: the node's repositories
    assert archive_sources("debian-12", "x86_64", None) == []  # no mirror: the node's sources
    assert archive_sources("debian-12", "x86_64", {"offline": False}) == []


def test_a_task_that_installs_no_recommends_says_so(tmp_path):
    """The monitoring stage's apt tasks set install_recommends: false: their lines carry it,
    so kiln mirror fetch leaves those packages' Recommends out as apt does."""
    plan = mirror_plan(require_valid(copy_example(tmp_path, kiln_monitoring={"enabled": True})))
    exporter = [a for a in plan.artifacts if a.name == "prometheus-node-exporter"]
    assert exporter and all(not a.recommends for a in exporter)
    assert all(a.recommends for a in plan.artifacts if a.role == "base")
    line = next(row for row in plan.lines() if row.startswith("deb\tprometheus-node-exporter"))
    assert line.endswith("\twithout recommends")
