"""What the nvidia roles would put on each platform (#28), against recorded real ansible_facts
(tests/fixtures/real/ansible-facts, SOURCE.txt): repository and key, the driver's packages at
their exact version, the branch pin, the hold mechanism, the DCGM, CUDA and NCCL package names,
Ubuntu 24.04's user-namespace sysctl; the nccl role's packages, versions, build and holds, the
base role's packages, chrony paths and holds, and slurm_maintenance's hold commands. Ubuntu and
RHEL hosts cannot be run here (their images cannot be pulled on these machines; docs/gpu.md,
Platforms): the unit tests render the roles' own vars and defaults with kiln's filters, the
`local` tests run real ansible-playbook over the recorded facts and check every playbook's
syntax."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.facts.system.distribution import Distribution
from jinja2 import StrictUndefined, TemplateError
from jinja2.nativetypes import NativeEnvironment

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
ROLES = PLAYBOOKS / "roles"
FACTS = ROOT / "tests" / "fixtures" / "real" / "ansible-facts"
REPOS = "https://developer.download.nvidia.com/compute/cuda/repos"
DEBIAN_12 = {  # no recorded capture: the keys kiln reads, as Debian 12's setup reports them
    "ansible_distribution": "Debian",
    "ansible_distribution_version": "12.5",
    "ansible_distribution_major_version": "12",
    "ansible_os_family": "Debian",
    "ansible_architecture": "x86_64",
    "ansible_kernel": "6.1.0-28-amd64",
}
DEBIAN_13 = {  # likewise Debian 13's (the sandbox's default)
    "ansible_distribution": "Debian",
    "ansible_distribution_version": "13.1",
    "ansible_distribution_major_version": "13",
    "ansible_os_family": "Debian",
    "ansible_architecture": "x86_64",
    "ansible_kernel": "6.12.48+deb13-amd64",
}


def recorded(name: str) -> dict:
    """A recorded capture as the node's ansible_facts (without the ansible_ prefix); a capture
    that shows no architecture is given x86_64 (said in SOURCE.txt)."""
    if name == "debian-12":
        raw = DEBIAN_12
    elif name == "debian-13":
        raw = DEBIAN_13
    elif name == "rocky-9.6":
        raw = json.loads((FACTS / "rocky-9.6-and-ubuntu-24.04.json").read_text())["rocky"]
    else:
        raw = json.loads((FACTS / name).read_text())
    facts = {key.removeprefix("ansible_"): value for key, value in raw.items()}
    facts.setdefault("architecture", "x86_64")
    facts.setdefault("kernel", "5.14.0-362.8.1.el9_3.x86_64")
    # two captures (AlmaLinux 9.7, Rocky 9.2) show no os_family: Ansible's own table gives it
    facts.setdefault("os_family", Distribution.OS_FAMILY[facts["distribution"]])
    return facts


def environment() -> NativeEnvironment:
    """Jinja with kiln's filters, loaded through the shims the playbooks use, and the few
    Ansible filters the roles' variables use (basename, split, bool, regex_replace, quote)."""
    env = NativeEnvironment(undefined=StrictUndefined)
    env.filters["basename"] = os.path.basename
    env.filters["split"] = lambda text, sep=None: str(text).split(sep)
    env.filters["bool"] = lambda value: str(value).strip().lower() in ("true", "yes", "on", "1")
    env.filters["regex_replace"] = lambda value, pattern, repl: re.sub(pattern, repl, str(value))
    env.filters["quote"] = lambda value: shlex.quote(str(value))
    for shim in sorted((PLAYBOOKS / "filter_plugins").glob("kiln_*.py")):
        spec = importlib.util.spec_from_file_location(shim.stem, shim)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        env.filters.update(module.FilterModule().filters())
    return env


def render_role(role: str, values: dict, names: list[str]) -> dict:
    """The role's defaults and vars (vars win, as in Ansible) with `values` set, each rendered
    once everything it reads is (a variable of runtime results is never needed here); a role
    with vars/<os_family>.yml (which it includes first thing) gets the node's family's too."""
    env = environment()
    raw: dict = {}
    family = (values.get("ansible_facts") or {}).get("os_family")
    for part in ("defaults/main.yml", "vars/main.yml", f"vars/{family}.yml"):
        path = ROLES / role / part
        if path.exists():
            raw.update(yaml.safe_load(path.read_text()) or {})
    raw.update(values)
    done = {k: v for k, v in raw.items() if "{{" not in str(v)}
    pending = {k: v for k, v in raw.items() if k not in done}

    def render(value):
        if isinstance(value, list):
            return [render(item) for item in value]
        return env.from_string(value.strip()).render(done) if isinstance(value, str) else value

    while pending:
        progress = False
        for key, template in list(pending.items()):
            try:
                done[key] = render(template)
            except (TemplateError, TypeError, AttributeError, KeyError):
                continue
            del pending[key]
            progress = True
        if not progress:
            break
    return {name: done[name] for name in names}


CASES = {
    # capture: (kiln_os, repository dir, key file, flavour, driver packages, module stream, hold)
    "ubuntu-22.04-x86_64.json": (
        "ubuntu2204/x86_64",
        "3bf863cc.pub",
        "proprietary",
        ["nvidia-driver-550", "nvidia-dkms-550", "nvidia-utils-550", "nvidia-compute-utils-550"],
        None,
        "apt-mark",
    ),
    "ubuntu-24.04-aarch64.json": (
        "ubuntu2404/sbsa",
        "3bf863cc.pub",
        "open",
        [
            "nvidia-driver-550-open",
            "nvidia-dkms-550-open",
            "nvidia-utils-550",
            "nvidia-compute-utils-550",
        ],
        None,
        "apt-mark",
    ),
    "rhel-9.7-aarch64.json": (
        "rhel9/sbsa",
        "D42D0685.pub",
        "proprietary",
        ["nvidia-driver", "kmod-nvidia-latest-dkms", "nvidia-driver-cuda", "nvidia-persistenced"],
        "550-dkms",
        "versionlock",
    ),
    "almalinux-9.7-aarch64.json": (
        "rhel9/sbsa",
        "D42D0685.pub",
        "open",
        ["nvidia-driver", "kmod-nvidia-open-dkms", "nvidia-driver-cuda", "nvidia-persistenced"],
        "550-open",
        "versionlock",
    ),
    "rocky-9.2.json": (
        "rhel9/x86_64",
        "D42D0685.pub",
        "proprietary",
        ["nvidia-driver", "kmod-nvidia-latest-dkms", "nvidia-driver-cuda", "nvidia-persistenced"],
        "550-dkms",
        "versionlock",
    ),
    "debian-12": (
        "debian12/x86_64",
        "3bf863cc.pub",
        "proprietary",
        ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "nvidia-persistenced"],
        None,
        "apt-mark",
    ),
}
TARGET = {"apt-mark": "550.127.08-1", "versionlock": "3:550.127.08-1.el9"}
KILN = {"kiln_versions": {"driver_branch": 550, "cuda": "12.4", "nccl": "2.21.5"}}


@pytest.mark.parametrize("capture", sorted(CASES))
def test_the_driver_role_on_each_recorded_platform(capture):
    repo, key, flavour, packages, stream, hold = CASES[capture]
    facts = recorded(capture)
    values = {**KILN, "ansible_facts": facts, "nvidia_driver_kernel_modules": flavour}
    got = render_role(
        "nvidia_driver",
        values,
        [
            "__nvidia_driver_platform",
            "__nvidia_driver_packages_list",
            "__nvidia_driver_fabricmanager_packages",
            "__nvidia_driver_headers_package",
            "__nvidia_driver_initramfs_command",
        ],
    )
    platform = got["__nvidia_driver_platform"]
    assert platform["repository_url"] == f"{REPOS}/{repo}/"
    assert platform["key_url"] == f"{REPOS}/{repo}/{key}"
    assert platform["driver_role"] is True
    assert got["__nvidia_driver_packages_list"] == packages
    assert platform["hold"] == hold and platform["driver_stream"] == stream
    # the exact version, as the package manager spells it, and the fabric manager beside it
    target = TARGET[hold]
    names = environment().filters["kiln_driver_install_names"](
        platform, target, packages, fabricmanager=True
    )
    if hold == "apt-mark":
        assert names[: len(packages)] == [f"{p}={target}" for p in packages]
        assert names[len(packages) :] == [
            f"nvidia-fabricmanager-550={target}",
            f"libnvidia-nscq-550={target}",
        ]
        assert got["__nvidia_driver_initramfs_command"][0] == "update-initramfs"
        assert got["__nvidia_driver_headers_package"] == f"linux-headers-{facts['kernel']}"
    else:
        assert names[: len(packages)] == [f"{p}-{target}" for p in packages]
        assert names[len(packages) :] == [
            "nvidia-fabric-manager-550.127.08",
            "libnvidia-nscq-550-550.127.08",
        ]
        assert got["__nvidia_driver_initramfs_command"][0] == "dracut"
        assert got["__nvidia_driver_headers_package"] == f"kernel-devel-{facts['kernel']}"


@pytest.mark.parametrize("capture", sorted(CASES))
def test_the_repository_dcgm_cuda_nccl_and_base_on_each_recorded_platform(capture):
    repo, key, _, _, _, hold = CASES[capture]
    facts = recorded(capture)
    values = {**KILN, "ansible_facts": facts, "kiln_gpu_count": 8, "kiln_gpu_model": "h100-sxm"}
    source = render_role(
        "nvidia_repo",
        values,
        ["nvidia_repo_url", "nvidia_repo_key_url", "nvidia_repo_key_fingerprint"],
    )
    assert source["nvidia_repo_url"] == f"{REPOS}/{repo}/"
    assert source["nvidia_repo_key_url"] == f"{REPOS}/{repo}/{key}"
    fingerprint = {
        "3bf863cc.pub": "EB693B3035CD5710E231E123A4B469963BF863CC",
        "D42D0685.pub": "610C7B14E068A878070DA4E99CD0A493D42D0685",
    }[key]
    assert source["nvidia_repo_key_fingerprint"] == fingerprint
    dcgm = render_role("nvidia_dcgm", values, ["nvidia_dcgm_packages", "__nvidia_dcgm_platform"])
    assert dcgm["nvidia_dcgm_packages"] == ["datacenter-gpu-manager-4-cuda12"]
    assert dcgm["__nvidia_dcgm_platform"]["hold"] == hold
    cuda = render_role("nvidia_cuda", values, ["__nvidia_cuda_platform"])
    assert cuda["__nvidia_cuda_platform"]["hold"] == hold
    assert environment().filters["kiln_cuda_toolkit_package"]("12.4") == "cuda-toolkit-12-4"
    platform = dcgm["__nvidia_dcgm_platform"]
    nccl = {"apt-mark": ["libnccl2", "libnccl-dev"], "versionlock": ["libnccl", "libnccl-devel"]}
    assert platform["nccl_packages"] == nccl[hold]
    base = render_role("base", values, ["__base_userns_sysctl"])
    expected = "kernel.apparmor_restrict_unprivileged_userns" if "24.04" in capture else ""
    assert base["__base_userns_sysctl"] == expected


# What the nccl, base and slurm_maintenance roles use per OS family: NCCL's packages at their
# version, the build's packages and Open MPI, the holds; the base packages, chrony, the holds.
NCCL_VERSION = "2.21.5-1+cuda12.4"
FAMILIES = {
    "apt": {
        "os_family": "Debian",
        "nccl": ["libnccl2", "libnccl-dev"],
        "install": [f"libnccl2={NCCL_VERSION}", f"libnccl-dev={NCCL_VERSION}"],
        "cuda": ["cuda-nvcc-12-4", "cuda-crt-12-4", "cuda-cudart-dev-12-4"],
        "build": ["build-essential", "libopenmpi-dev", "openmpi-bin", "libpmix-dev"],
        "mpi_home": "/usr/lib/{arch}-linux-gnu/openmpi",
        "mpi_include": "",
        "hold": "apt-mark",
        "base": ["chrony", "python3-apt", "pciutils", "numactl", "ethtool", "rsync"],
        "chrony": ("/etc/chrony/chrony.conf", "/etc/chrony/sources.d", "chrony"),
        "package_facts": "apt",
        "held_prefixes": ["linux-image-", "linux-headers-", "linux-modules-", "nvidia-",
                          "libnvidia-", "cuda-drivers", "datacenter-gpu-manager"],
        # the maintenance step's module, and its argument on lifting and on setting the holds
        "maintenance": ("ansible.builtin.dpkg_selections", "selection", "install", "hold"),
    },
    "dnf": {
        "os_family": "RedHat",
        "nccl": ["libnccl", "libnccl-devel"],
        "install": [f"libnccl-{NCCL_VERSION}", f"libnccl-devel-{NCCL_VERSION}"],
        "cuda": ["cuda-nvcc-12-4", "cuda-crt-12-4", "cuda-cudart-devel-12-4"],
        "build": ["gcc-c++", "make", "openmpi-devel", "pmix-devel"],
        "mpi_home": "/usr/lib64/openmpi",
        "mpi_include": "/usr/include/openmpi-{arch}",
        "hold": "versionlock",
        "base": ["chrony", "python3-dnf-plugin-versionlock", "pciutils", "numactl", "ethtool",
                 "rsync"],
        "chrony": ("/etc/chrony.conf", "/etc/chrony.d", "chronyd"),
        "package_facts": "rpm",
        "held_prefixes": ["kernel", "kmod-nvidia", "nvidia-", "libnvidia-", "cuda-drivers",
                          "datacenter-gpu-manager"],
        "maintenance": ("community.general.dnf_versionlock", "state", "absent", "present"),
    },
}  # fmt: skip
PLATFORMS = sorted([*CASES, "debian-13"])


def family_of(capture: str) -> str:
    return "apt" if capture.startswith(("ubuntu", "debian")) else "dnf"


@pytest.mark.parametrize("capture", PLATFORMS)
def test_nccl_base_and_maintenance_on_each_recorded_platform(capture):
    facts = recorded(capture)
    want = FAMILIES[family_of(capture)]
    assert facts["os_family"] == want["os_family"]
    values = {**KILN, "ansible_facts": facts, "kiln_gpu_count": 8}
    nccl = render_role(
        "nccl",
        values,
        ["nccl_packages", "__nccl_package_version", "nccl_tests_cuda_packages",
         "nccl_tests_build_packages", "__nccl_mpi_home", "__nccl_platform"],
    )  # fmt: skip
    platform = nccl["__nccl_platform"]
    assert nccl["nccl_packages"] == want["nccl"]
    assert nccl["__nccl_package_version"] == NCCL_VERSION
    # install.yml's names, as the package manager spells them (apt name=v, dnf name-v)
    (install,) = yaml.safe_load((ROLES / "nccl" / "tasks" / "install.yml").read_text())
    names = environment().from_string(install["ansible.builtin.package"]["name"].strip())
    assert names.render(nccl) == want["install"]
    assert nccl["nccl_tests_cuda_packages"] == want["cuda"]
    assert nccl["nccl_tests_build_packages"] == want["build"]
    arch = facts["architecture"]
    assert nccl["__nccl_mpi_home"] == want["mpi_home"].format(arch=arch)
    assert platform["mpi_include"] == want["mpi_include"].format(arch=arch)
    # read-<family>.yml reads the installed versions; the holds are nvidia_repo's entry points
    assert platform["hold"] == want["hold"]
    read = (ROLES / "nccl" / "tasks" / f"read-{platform['family']}.yml").read_text()
    assert ("dpkg-query" if platform["family"] == "apt" else "'rpm', '-q'") in read
    assert (ROLES / "nvidia_repo" / "tasks" / f"hold-{platform['hold']}.yml").exists()

    base = render_role(
        "base",
        {**values, "base_packages": [], "base_held_package_prefixes": []},
        ["__base_packages_list", "__base_chrony_conf", "__base_chrony_sources_dir",
         "__base_chrony_service", "__base_package_facts_manager", "__base_hold",
         "__base_held_prefixes"],
    )  # fmt: skip
    assert base["__base_packages_list"] == want["base"]
    chrony = (base["__base_chrony_conf"], base["__base_chrony_sources_dir"])
    assert (*chrony, base["__base_chrony_service"]) == want["chrony"]
    assert base["__base_package_facts_manager"] == want["package_facts"]
    assert base["__base_hold"] == want["hold"]
    assert base["__base_held_prefixes"] == want["held_prefixes"]
    assert (ROLES / "base" / "tasks" / f"hold-{base['__base_hold']}.yml").exists()
    assert (ROLES / "base" / "tasks" / f"packages-{facts['os_family']}.yml").exists()

    maintenance = render_role("slurm_maintenance", values, ["__slurm_maintenance_hold"])
    assert maintenance["__slurm_maintenance_hold"] == want["hold"]
    module, argument, lift, hold = want["maintenance"]
    (task,) = yaml.safe_load(
        (ROLES / "slurm_maintenance" / "tasks" / f"hold-{want['hold']}.yml").read_text()
    )
    env = environment()
    for holding, expected in ((False, lift), (True, hold)):
        rendered = env.from_string(task[module][argument]).render(
            __slurm_maintenance_holding=holding
        )
        assert rendered == expected


def test_an_installed_driver_of_another_branch_is_found_by_its_name():
    """Ubuntu's names carry the branch: a node on nvidia-driver-535 moving to 550 is an upgrade,
    not a first install; rpm's epoch is kept, its absent epoch dropped."""
    env = environment()
    ubuntu = env.filters["kiln_gpu_platform"](recorded("ubuntu-22.04-x86_64.json"), 550)
    installed = {
        "nvidia-dkms-535": "535.216.01-0ubuntu1",
        "nvidia-driver-535": "535.216.01-0ubuntu1",
    }
    assert env.filters["kiln_installed_driver"](installed, ubuntu) == "535.216.01-0ubuntu1"
    plan = env.filters["kiln_driver_action"]("535.216.01-0ubuntu1", 550)
    assert plan["action"] == "upgrade" and plan["from_branch"] == 535
    rpm = env.filters["kiln_rpm_installed"](
        "nvidia-driver 3:550.127.08-1.el9\nlibnccl (none):2.21.5-1+cuda12.4\n"
        "package kmod-nvidia-latest-dkms is not installed\n"
    )
    assert rpm == {"nvidia-driver": "3:550.127.08-1.el9", "libnccl": "2.21.5-1+cuda12.4"}
    rhel = env.filters["kiln_gpu_platform"](recorded("rhel-9.7-aarch64.json"), 550)
    assert env.filters["kiln_installed_driver"](rpm, rhel) == "3:550.127.08-1.el9"
    listing = (
        "nvidia-driver | 3:550.127.08-1.el9 | kiln-nvidia\n"
        "nvidia-driver | 3:550.54.15-1.el9 | kiln-nvidia\n"
        "nvidia-driver | 3:570.86.15-1.el9 | kiln-nvidia\n"
    )
    assert env.filters["kiln_apt_candidates"](listing, 550, "kiln-nvidia") == [
        "3:550.127.08-1.el9",
        "3:550.54.15-1.el9",
    ]


def test_the_module_stream_listing_is_read():
    listing = (
        "Name          Stream             Profiles                 Summary\n"
        "nvidia-driver latest             default [d], fm, ks, src Nvidia driver\n"
        "nvidia-driver latest-dkms [d]    default [d], fm, ks      Nvidia driver\n"
        "nvidia-driver 550-dkms [e]       default [d] [i], fm, ks  Nvidia driver\n"
        "nvidia-driver 550-open           default [d], fm, ks      Nvidia driver\n"
        "\nHint: [d]efault, [e]nabled, [x]disabled, [i]nstalled\n"
    )
    got = environment().filters["kiln_module_streams"](listing, "nvidia-driver")
    assert got == {
        "present": True,
        "streams": ["latest", "latest-dkms", "550-dkms", "550-open"],
        "enabled": "550-dkms",
    }
    assert environment().filters["kiln_module_streams"]("", "nvidia-driver")["present"] is False


def test_every_role_documents_every_default_in_its_argument_specs():
    """meta/argument_specs.yml on every role, its entry points' options covering each input in
    defaults/main.yml (a role of entry points only, slurm_maintenance, documents them there)."""
    for role in sorted(p for p in ROLES.iterdir() if p.is_dir()):
        spec = role / "meta" / "argument_specs.yml"
        assert spec.exists(), f"{role.name} has no meta/argument_specs.yml"
        entries = yaml.safe_load(spec.read_text())["argument_specs"]
        documented = set().union(*(set(e.get("options") or {}) for e in entries.values()))
        defaults = role / "defaults" / "main.yml"
        inputs = set(yaml.safe_load(defaults.read_text()) or {}) if defaults.exists() else set()
        assert inputs <= documented, f"{role.name}: undocumented {sorted(inputs - documented)}"
        for name in entries:
            if name != "main":
                assert (role / "tasks" / f"{name}.yml").exists(), f"{role.name}: no {name}.yml"


def _ansible(tool: str) -> Path:
    path = Path(sys.executable).parent / tool
    if not path.exists():
        pytest.skip(f"{tool} is not installed beside python")
    return path


def _env(**extra) -> dict:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT / "cli"),
        "ANSIBLE_FILTER_PLUGINS": str(PLAYBOOKS / "filter_plugins"),
        "ANSIBLE_LIBRARY": str(PLAYBOOKS / "library"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_NOCOLOR": "1",
        **extra,
    }


@pytest.mark.local
def test_every_playbook_passes_the_syntax_check():
    playbooks = sorted(PLAYBOOKS.glob("*.yml"))
    assert playbooks
    argv = [str(_ansible("ansible-playbook")), "--syntax-check", "-i", "localhost,"]
    done = subprocess.run(
        argv + [str(p) for p in playbooks],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=PLAYBOOKS,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


FAKE_FACTS = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}})
module.exit_json(changed=False, ansible_facts=module.params["facts"])
"""

PLAY = """\
- name: What the nvidia roles read on each recorded platform
  hosts: all
  gather_facts: false
  tasks:
    - name: Become the recorded machine
      fake_facts:
        facts: "{{ recorded }}"
    - name: Read the roles' inputs as Ansible resolves them
      ansible.builtin.include_vars:
        file: "{{ item }}"
      loop:
        - ROLES/nvidia_driver/defaults/main.yml
        - ROLES/nvidia_driver/vars/main.yml
        - ROLES/nvidia_repo/defaults/main.yml
        - ROLES/nvidia_repo/vars/main.yml
        - ROLES/nvidia_dcgm/defaults/main.yml
        - ROLES/base/defaults/main.yml
        - ROLES/base/vars/main.yml
        - ROLES/base/vars/{{ ansible_facts['os_family'] }}.yml
        - ROLES/nccl/defaults/main.yml
        - ROLES/nccl/vars/main.yml
        - ROLES/slurm_maintenance/defaults/main.yml
        - ROLES/slurm_maintenance/vars/main.yml
    # what the driver role passes to nvidia_repo and what the inventory chose (include_vars
    # outranks inventory variables; set_fact outranks include_vars)
    - name: Take the node's flavour and branch
      ansible.builtin.set_fact:
        nvidia_driver_kernel_modules: "{{ flavour }}"
        nvidia_repo_driver_branch: 550
        nvidia_repo_driver_flavour: "{{ flavour }}"
    - name: Write them down
      ansible.builtin.copy:
        dest: "OUT/{{ inventory_hostname }}.json"
        mode: "0644"
        content: >-
          {{ {'platform': __nvidia_driver_platform,
              'packages': __nvidia_driver_packages_list,
              'install': __nvidia_driver_platform | kiln_driver_install_names(
                  target, __nvidia_driver_packages_list, fabricmanager=true),
              'repo_url': nvidia_repo_url, 'key_url': nvidia_repo_key_url,
              'stream': __nvidia_repo_platform.driver_stream,
              'dcgm': nvidia_dcgm_packages, 'userns': __base_userns_sysctl,
              'nccl': nccl_packages, 'nccl_install': nccl_packages
                  | map('regex_replace', '$', __nccl_platform.version_separator
                        ~ __nccl_package_version) | list,
              'nccl_cuda': nccl_tests_cuda_packages, 'nccl_build': nccl_tests_build_packages,
              'mpi_home': __nccl_mpi_home, 'nccl_hold': __nccl_platform.hold,
              'base': __base_packages_list, 'chrony': [__base_chrony_conf,
                  __base_chrony_sources_dir, __base_chrony_service],
              'package_facts': __base_package_facts_manager, 'base_hold': __base_hold,
              'held_prefixes': __base_held_prefixes,
              'maintenance_hold': __slurm_maintenance_hold} | to_json }}
"""


@pytest.mark.local
def test_real_ansible_renders_the_same_on_every_recorded_platform(tmp_path):
    library, out = tmp_path / "library", tmp_path / "out"
    library.mkdir()
    out.mkdir()
    (library / "fake_facts.py").write_text(FAKE_FACTS)
    play = PLAY.replace("ROLES", str(ROLES)).replace("OUT", str(out))
    (tmp_path / "play.yml").write_text(play)
    hosts = {}
    for capture, (_, _, flavour, _, _, hold) in [*CASES.items(), ("debian-13", CASES["debian-12"])]:
        hosts[capture.removesuffix(".json")] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "recorded": recorded(capture),
            "target": TARGET[hold],
            "flavour": flavour,
            **KILN,
        }
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"hosts": hosts}}))
    argv = [str(_ansible("ansible-playbook")), "-i", str(tmp_path / "hosts.yml")]
    done = subprocess.run(
        argv + [str(tmp_path / "play.yml")],
        capture_output=True,
        text=True,
        env=_env(ANSIBLE_LIBRARY=f"{library}:{PLAYBOOKS / 'library'}"),
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for capture, (repo, key, _, packages, stream, hold) in CASES.items():
        got = json.loads((out / f"{capture.removesuffix('.json')}.json").read_text())
        assert got["repo_url"] == f"{REPOS}/{repo}/" and got["key_url"] == f"{REPOS}/{repo}/{key}"
        assert got["packages"] == packages and got["stream"] == stream
        assert got["platform"]["hold"] == hold
        separator = "=" if hold == "apt-mark" else "-"
        assert got["install"][0] == f"{packages[0]}{separator}{TARGET[hold]}"
        assert got["dcgm"] == ["datacenter-gpu-manager-4-cuda12"]
        assert bool(got["userns"]) == ("24.04" in capture)
    for capture in PLATFORMS:  # Debian 13 too: the nccl, base and maintenance values
        got = json.loads((out / f"{capture.removesuffix('.json')}.json").read_text())
        want, arch = FAMILIES[family_of(capture)], recorded(capture)["architecture"]
        assert got["nccl"] == want["nccl"] and got["nccl_install"] == want["install"]
        assert got["nccl_cuda"] == want["cuda"] and got["nccl_build"] == want["build"]
        assert got["mpi_home"] == want["mpi_home"].format(arch=arch)
        assert got["base"] == want["base"] and tuple(got["chrony"]) == want["chrony"]
        assert got["package_facts"] == want["package_facts"]
        assert got["held_prefixes"] == want["held_prefixes"]
        holds = {got["nccl_hold"], got["base_hold"], got["maintenance_hold"]}
        assert holds == {want["hold"]}


# The monitoring, infiniband (DOCA-OFED) and preflight roles per OS family: the node exporter's
# package, unit and options file, the DCGM exporter's install name and hold; DOCA's repository
# definition, install names and hold; the package query preflight reads the stack with. Debian's
# values are those the roles used before they were family-aware (compared value by value).
DOCA_URL = "https://linux.mellanox.com/public/repo/doca/2.9.3/{os}/{arch}/"
OTHER_FAMILY = {
    "apt": {
        "node_exporter": ("prometheus-node-exporter", "prometheus-node-exporter",
                          "/etc/default/prometheus-node-exporter", "prometheus-node-exporter.j2"),
        "dcgm_exporter": "datacenter-gpu-manager-exporter=4.1.1-1",
        "doca_install": ["doca-ofed"],  # apt preferences pick the version
        "query": "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'",
        "nccl": "libnccl2",
    },
    "dnf": {
        "node_exporter": ("node-exporter", "prometheus-node-exporter",
                          "/etc/systemd/system/prometheus-node-exporter.service.d/kiln.conf",
                          "prometheus-node-exporter.dropin.j2"),
        "dcgm_exporter": "datacenter-gpu-manager-exporter-4.1.1-1",
        "doca_install": ["doca-ofed-2.9.3*"],
        "query": "rpm -qa --queryformat '%{NAME} %{EPOCH}:%{VERSION}-%{RELEASE}\\n' \"$pattern\"",
        "nccl": "libnccl",
    },
}  # fmt: skip


@pytest.mark.parametrize("capture", PLATFORMS)
def test_monitoring_doca_and_preflight_on_each_recorded_platform(capture):
    facts = recorded(capture)
    family = family_of(capture)
    want, hold = OTHER_FAMILY[family], FAMILIES[family]["hold"]
    values = {**KILN, "ansible_facts": facts, "kiln_gpu_count": 8, "group_names": []}

    monitoring = render_role(
        "monitoring",
        {**values, "monitoring_dcgm_exporter_version": "4.1.1-1"},
        ["__monitoring_node_exporter_package_name", "__monitoring_node_exporter_unit",
         "__monitoring_node_exporter_options", "__monitoring_node_exporter_options_template",
         "__monitoring_dcgm_exporter_name", "__monitoring_hold"],
    )  # fmt: skip
    assert tuple(list(monitoring.values())[:4]) == want["node_exporter"]
    assert monitoring["__monitoring_dcgm_exporter_name"] == want["dcgm_exporter"]
    assert monitoring["__monitoring_hold"] == hold
    tasks = ROLES / "monitoring" / "tasks"
    assert (tasks / f"packages-{facts['os_family']}.yml").exists()
    dcgm = (tasks / f"dcgm-exporter-{facts['os_family']}.yml").read_text()
    assert ("dpkg_selections" if hold == "apt-mark" else "dnf_versionlock") in dcgm
    template = ROLES / "monitoring" / "templates" / want["node_exporter"][3]
    assert "--web.listen-address=:{{ monitoring_node_exporter_port }}" in template.read_text()

    doca = render_role(
        "infiniband",
        {**values, "infiniband_doca_version": "2.9.3"},
        ["__infiniband_doca_family", "__infiniband_doca_install_names"],
    )
    assert doca["__infiniband_doca_family"] == family
    tasks = ROLES / "infiniband" / "tasks"
    names = (tasks / f"doca-install-{family}.yml").read_text()
    assert (
        "infiniband_doca_packages" if family == "apt" else "__infiniband_doca_install_names"
    ) in names
    if family == "dnf":
        assert doca["__infiniband_doca_install_names"] == want["doca_install"]
        assert "dnf_versionlock" in names
    # the repository: an apt source line or a dnf baseurl, at the site's versioned URL
    os_dir = {"apt": "ubuntu22.04", "dnf": "rhel9.6"}[family]
    arch_dir = {"x86_64": "x86_64", "aarch64": "arm64-sbsa"}[facts["architecture"]]
    url = DOCA_URL.format(os=os_dir, arch=arch_dir)
    module = {"apt": "ansible.builtin.apt_repository", "dnf": "ansible.builtin.yum_repository"}
    steps = yaml.safe_load((tasks / f"doca-{family}.yml").read_text())
    (source,) = [step for step in steps if module[family] in step]
    env = environment()
    if family == "apt":
        line = source["ansible.builtin.apt_repository"]["repo"]
        assert (
            env.from_string(line).render(
                __infiniband_doca_keyring="/usr/share/keyrings/kiln-doca.asc",
                infiniband_doca_repo_url=url,
            )
            == f"deb [signed-by=/usr/share/keyrings/kiln-doca.asc] {url} ./"
        )
        pin = (ROLES / "infiniband" / "templates" / "doca-pin.j2").read_text()
        assert "Pin: version {{ infiniband_doca_version }}*" in pin
    else:
        repository = source["ansible.builtin.yum_repository"]
        assert env.from_string(repository["baseurl"]).render(infiniband_doca_repo_url=url) == url
        assert repository["gpgcheck"] is True
    for step in ("read", "install"):
        assert (tasks / f"doca-{step}-{family}.yml").exists()
    assert (tasks / f"doca_change-{family}.yml").exists()

    # preflight: the query and the versions read back by the platform entry's names
    query = env.filters["kiln_stack_query"](facts)
    assert query["family"] == family and query["nccl"] == want["nccl"]
    task = (ROLES / "preflight" / "tasks" / f"packages-{family}.yml").read_text()
    assert want["query"] in task
    if capture.startswith("debian"):
        # the very command preflight ran before (dpkg-query over these names)
        (read, _) = yaml.safe_load(task)
        cmd = env.from_string(read["ansible.builtin.shell"]["cmd"]).render(
            __preflight_stack_query=query
        )
        assert cmd == (
            "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' "
            "nvidia-driver libnccl2 'cuda-toolkit-[0-9]*' 2>/dev/null || true"
        )


def test_preflight_reads_the_stack_by_each_platform_s_names():
    """The driver of any branch and flavour, NCCL's library by the family's name, the newest
    toolkit; an OS of neither family asks nothing."""
    env = environment()
    query, versions = env.filters["kiln_stack_query"], env.filters["kiln_stack_versions"]
    ubuntu = query(recorded("ubuntu-24.04-aarch64.json"))
    assert ubuntu["patterns"] == ["nvidia-driver-*", "libnccl2", "cuda-toolkit-[0-9]*"]
    installed = {"nvidia-driver-550-open": "550.127.08-0ubuntu1", "libnccl2": "2.21.5-1+cuda12.4",
                 "cuda-toolkit-12-4": "12.4.1-1", "nvidia-driver-550-server": "x"}  # fmt: skip
    assert versions(installed, ubuntu) == {
        "driver": "550.127.08-0ubuntu1", "cuda": "12.4", "nccl": "2.21.5-1+cuda12.4"
    }  # fmt: skip
    rhel = query(recorded("rocky-9.2.json"))
    assert rhel["patterns"] == ["nvidia-driver", "libnccl", "cuda-toolkit-[0-9]*"]
    rpm = env.filters["kiln_rpm_installed"](
        "nvidia-driver 3:550.127.08-1.el9\nlibnccl (none):2.21.5-1+cuda12.4\n"
        "cuda-toolkit-12-4 (none):12.4.1-1\n"
    )
    assert versions(rpm, rhel) == {
        "driver": "3:550.127.08-1.el9", "cuda": "12.4", "nccl": "2.21.5-1+cuda12.4"
    }  # fmt: skip
    assert env.filters["kiln_installed_stack_problems"](versions(rpm, rhel)) == []
    # Debian's names, as before, with or without the query
    debian = {"nvidia-driver": "550.127.08-1", "libnccl2": "2.21.5-1+cuda12.4"}
    assert versions(debian, query(recorded("debian-12"))) == versions(debian)
    assert query({"distribution": "SLES", "os_family": "Suse"})["family"] == ""
