"""kiln reads inventories itself; what it builds must agree with `ansible-inventory --list`.

For every host: the groups it belongs to, and the value of every variable the inventory files
set (vault-encrypted values excepted). Skipped where ansible-inventory is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.inventory.findings import FindingCollector, Level
from kiln.inventory.resolve import resolve_hosts
from kiln.inventory.sources import read_inventory
from kiln.inventory.yamlfile import VaultValue

ANSIBLE_INVENTORY = Path(sys.executable).parent / "ansible-inventory"
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example-h100"

pytestmark = [
    pytest.mark.local,
    pytest.mark.skipif(
        not ANSIBLE_INVENTORY.exists(), reason="ansible-inventory is not installed beside python"
    ),
]

VAULT = """\
!vault |
  $ANSIBLE_VAULT;1.1;AES256
  62313365396662343061393464336163383764373764613633653634306231386433626436623361
  6134333665353966363534333632666535333761666131620a663537646436643839616531643561
  63396362663633646431653430643365626536616261383637346431356532386535316238393964
  3163383239373066330a376635353466303035356232383432343064373535323337643066633766
  3966
"""

# Children, ranges, a group reachable at two depths, group priority, vars at every level,
# folders of vars files, JSON, YAML 1.1 booleans: the places a home-made reader goes wrong.
YAML_INVENTORY = {
    "hosts.yml": """\
---
all:
  vars:
    level: all-inline
    site_name: lab
    deep: {a: 1, b: [x, y]}
  hosts:
    stray01:
  children:
    kiln_controllers:
      hosts:
        ctl01:
          ansible_host: 10.0.0.1
          level: host-inline
    kiln_compute:
      vars:
        level: compute-inline
        ib: [mlx5_0, mlx5_1]
      children:
        rack_a:
          vars:
            level: rack-inline
            kiln_rack: ra
          hosts:
            gpu-a[01:04]:
              kiln_gpu_model: h100-sxm
            gpu-a05:2222:
        rack_b:
          hosts:
            gpu-b[1:9:4]:
        high_prio:
          vars:
            ansible_group_priority: 50
            prio: high
          hosts:
            gpu-a01:
            gpu-b5:
        aaa_low:
          vars:
            prio: low
          hosts:
            gpu-a01:
            gpu-b5:
    maintenance:
      children:
        rack_a:
      hosts:
        gpu-b9:
          truthy: yes
          quoted: 'yes'
          on_word: on
          number: 0x10
          octal_like: 010
          version: 12.8
          version_str: "12.8"
""",
    "group_vars/all/00-base.yml": "level: gv-all\nfrom_all: base\n",
    "group_vars/all/10-site.yaml": "from_all: site\nsecret: " + VAULT,
    "group_vars/kiln_compute.yml": "level: gv-compute\ncompute_only: true\n",
    "group_vars/rack_a/main.yml": "level: gv-rack-a\n",
    "group_vars/rack_a/nested/extra.yml": "extra: nested\n",
    "group_vars/maintenance.json": '{"level": "gv-maintenance", "drain": true}\n',
    "group_vars/aaa_low.yml": "gv_prio: low\n",
    "group_vars/high_prio.yml": "gv_prio: high\n",
    "host_vars/gpu-a02.yml": "level: hv-a02\n",
    "host_vars/gpu-b1": "level: hv-b1-no-extension\n",
    "host_vars/ctl01/vars.yml": "ctl: true\n",
}

INI_INVENTORY = {
    "hosts": """\
# the same kinds of traps, in INI
orphan01 ansible_host=10.0.9.9

[kiln_controllers]
ctl01 ansible_host=10.0.0.1 ansible_port=2200

[kiln_compute:children]
rack1  # a comment after a group name
rack2

[rack1]   # a comment after a header
gpu[01:03]:2222 kiln_gpu_model=h100-sxm kiln_gpu_count=8 ratio=1.5 on=True
gpu04 quoted="8" spaced="two words" lst="[1, 2]" dct="{'a': 1}" tup="(1, 2)" zeros=08 no=no

[rack2]
gpu[a:c]-x

[rack1:vars]
kiln_rack=r1
count="8"
yes_word=yes
real_bool=False
with_comment=value # stays part of the value

[all:vars]
level=all-inline
site_name='lab'

[kiln_compute:vars]
level=compute-inline
ansible_group_priority=3
""",
    "group_vars/all.yml": "level: gv-all\n",
    "group_vars/rack2.yaml": "level: gv-rack2\n",
    "host_vars/gpu02.yml": "level: hv-gpu02\n",
}


def ansible_view(inventory: Path, tmp_path: Path) -> tuple[dict[str, set[str]], dict[str, dict]]:
    config = tmp_path / "ansible.cfg"  # an empty one: no user or system config leaks in
    config.write_text("[defaults]\n")
    env = {
        **os.environ,
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
        "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "true",
        "ANSIBLE_DEPRECATION_WARNINGS": "false",
        "ANSIBLE_CONFIG": str(config),
    }
    result = subprocess.run(
        [str(ANSIBLE_INVENTORY), "-i", str(inventory), "--list"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    hostvars = data.pop("_meta")["hostvars"]
    parents: dict[str, set[str]] = {}
    direct: dict[str, set[str]] = {}
    for group, body in data.items():
        for child in body.get("children", []):
            parents.setdefault(child, set()).add(group)
        for host in body.get("hosts", []):
            direct.setdefault(host, set()).add(group)

    def ancestors(group: str) -> set[str]:
        found = {group}
        for parent in parents.get(group, ()):
            found |= ancestors(parent)
        return found

    groups = {}
    for host in set(direct) | set(hostvars):
        member = set().union(*(ancestors(g) for g in direct.get(host, {"ungrouped"})))
        groups[host] = member - {"all"}
    return groups, hostvars


def kiln_view(inventory: Path):
    collector = FindingCollector()
    raw = read_inventory(inventory, collector)
    assert raw is not None
    hosts = resolve_hosts(raw, collector)
    problems = [f.message for f in collector.findings if f.level is Level.ERROR]
    assert problems == []
    return hosts


def assert_agree(inventory: Path, tmp_path: Path) -> dict:
    ansible_groups, ansible_vars = ansible_view(inventory, tmp_path)
    hosts = kiln_view(inventory)
    assert set(hosts) == set(ansible_groups)
    compared = 0
    for name, host in hosts.items():
        assert set(host.groups) == ansible_groups[name], name
        assert len(host.groups) == len(set(host.groups)), name
        theirs = ansible_vars.get(name, {})
        for key, located in host.vars.items():
            if isinstance(located.value, VaultValue):
                assert key in theirs, (name, key)
                continue
            assert key in theirs, f"{name}: ansible has no {key}"
            assert theirs[key] == located.value, (
                f"{name}.{key}: kiln {located.value!r} ({located.origin.display(inventory)}), "
                f"ansible {theirs[key]!r}"
            )
            assert type(theirs[key]) is type(located.value) or isinstance(located.value, dict)
            compared += 1
        # Nothing the files set is missing from kiln's view.
        assert set(theirs) <= set(host.vars), (name, set(theirs) - set(host.vars))
    assert compared > 0
    return hosts


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_yaml_inventory_agrees(tmp_path):
    hosts = assert_agree(write_tree(tmp_path / "inv", YAML_INVENTORY), tmp_path)
    # The traps were really set: spot-check kiln's answers too.
    level = {name: host.vars["level"].value for name, host in hosts.items()}
    assert level["gpu-a02"] == "hv-a02"
    assert level["gpu-b1"] == "hv-b1-no-extension"
    # rack_a sits at depth 2 (under kiln_compute) even though maintenance (depth 1) holds it.
    assert level["gpu-a01"] == "gv-rack-a"
    assert level["gpu-b9"] == "gv-maintenance"
    assert level["ctl01"] == "host-inline"
    assert level["stray01"] == "gv-all"
    assert hosts["gpu-a01"].vars["prio"].value == "high"
    assert hosts["gpu-a01"].vars["gv_prio"].value == "high"
    assert hosts["gpu-a05"].vars["ansible_port"].value == 2222
    assert sorted(h for h in hosts if h.startswith("gpu-b")) == ["gpu-b1", "gpu-b5", "gpu-b9"]


def test_ini_inventory_agrees(tmp_path):
    hosts = assert_agree(write_tree(tmp_path / "inv", INI_INVENTORY), tmp_path)
    assert hosts["gpu04"].vars["quoted"].value == 8
    assert hosts["gpu04"].vars["count"].value == "8"
    assert hosts["gpu01"].vars["ansible_port"].value == 2222
    assert hosts["gpu02"].vars["level"].value == "hv-gpu02"
    assert sorted(h for h in hosts if h.endswith("-x")) == ["gpua-x", "gpub-x", "gpuc-x"]
    assert hosts["gpub-x"].vars["level"].value == "gv-rack2"
    assert "ansible_group_priority" not in hosts["gpu01"].vars
    assert hosts["orphan01"].groups == ["ungrouped"]


def test_extensionless_yaml_and_ini_sources_agree(tmp_path):
    """Two sources in one directory: an extensionless YAML file and an INI file."""
    inventory = write_tree(
        tmp_path / "inv",
        {
            "10-hosts": "all:\n  children:\n    kiln_compute:\n      hosts:\n"
            "        gpu[1:2]:\n          kiln_rack: r1\n",
            "20-more.ini": "[kiln_compute]\ngpu3 kiln_rack=r2\n[kiln_compute:vars]\nv=1\n",
            "group_vars/kiln_compute": "w: 2\n",
        },
    )
    hosts = assert_agree(inventory, tmp_path)
    assert sorted(hosts) == ["gpu1", "gpu2", "gpu3"]


def test_bad_inventory_corpus_agrees_where_ansible_parses_it(tmp_path):
    """The corpus cases that are valid Ansible (the mistakes are kiln's to catch)."""
    corpus = REPO / "tests" / "fixtures" / "bad-inventories"
    for case in ("ini-inventory", "duplicate-bmc-address", "plaintext-secrets", "wrong-types"):
        inventory = tmp_path / case
        shutil.copytree(corpus / case / "inventory", inventory)
        assert_agree(inventory, tmp_path)


def test_example_inventory_agrees(tmp_path):
    if not EXAMPLE.is_dir():
        pytest.skip("inventories/example-h100 is not there yet")
    assert_agree(EXAMPLE, tmp_path)
