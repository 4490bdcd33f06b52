"""The inventory reader: host ranges, INI and YAML as Ansible reads them, vars dirs, precedence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kiln.inventory.findings import FindingCollector, Level
from kiln.inventory.hostranges import HostRangeError, expand_host_range
from kiln.inventory.raw import RawInventory
from kiln.inventory.resolve import ResolvedHost, resolve_hosts
from kiln.inventory.sources import read_inventory


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def load(root: Path, files: dict[str, str]) -> tuple[RawInventory, dict[str, ResolvedHost], list]:
    write_tree(root, files)
    collector = FindingCollector()
    raw = read_inventory(root, collector)
    assert raw is not None
    hosts = resolve_hosts(raw, collector)
    return raw, hosts, collector.findings


def values(host: ResolvedHost) -> dict[str, object]:
    return {key: located.value for key, located in host.vars.items()}


def errors(findings) -> list[str]:
    return [f.message for f in findings if f.level is Level.ERROR]


# -- host ranges ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("gpu01", ["gpu01"]),
        ("gpu[001:003]", ["gpu001", "gpu002", "gpu003"]),
        ("gpu[08:11]", ["gpu08", "gpu09", "gpu10", "gpu11"]),
        ("n[1:3]", ["n1", "n2", "n3"]),
        ("n[9:11]", ["n9", "n10", "n11"]),
        ("n[:2]", ["n0", "n1", "n2"]),
        ("rack[a:c]", ["racka", "rackb", "rackc"]),
        ("rack[x:B]", ["rackx", "racky", "rackz", "rackA", "rackB"]),
        ("n[0:20:5]", ["n0", "n5", "n10", "n15", "n20"]),
        ("n[a:e:2]", ["na", "nc", "ne"]),
        ("r[a:b]-n[1:2]", ["ra-n1", "ra-n2", "rb-n1", "rb-n2"]),
        ("r[1:2]n[01:02].lab", ["r1n01.lab", "r1n02.lab", "r2n01.lab", "r2n02.lab"]),
    ],
)
def test_host_range_expansion(pattern, names):
    assert expand_host_range(pattern) == names


def test_host_range_scale():
    names = expand_host_range("gpu[00001:12500]")
    assert len(names) == 12500
    assert names[0] == "gpu00001" and names[-1] == "gpu12500"


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("gpu[1:]", "must give an end"),
        ("gpu[01:100]", "same number of digits"),
        ("gpu[1:10:0]", "positive step"),
        ("gpu[1:10:x]", "non-numeric step"),
        ("gpu[5:1]", "begins after it ends"),
        ("gpu[c:a]", "begins after it ends"),
        ("gpu[a:3]", "numeric ([01:10]) or single letters"),
    ],
)
def test_host_range_errors(pattern, message):
    with pytest.raises(HostRangeError, match=re.escape(message)):
        expand_host_range(pattern)


def test_host_range_error_is_a_finding(tmp_path):
    _, hosts, findings = load(tmp_path, {"hosts.yml": "all:\n  hosts:\n    gpu[01:100]:\n"})
    assert hosts == {}
    (finding,) = findings
    assert finding.level is Level.ERROR
    assert finding.origin.line == 3
    assert "same number of digits" in finding.message


# -- YAML inventories ----------------------------------------------------------------------


def test_yaml_children_ranges_and_origins(tmp_path):
    raw, hosts, findings = load(
        tmp_path,
        {
            "hosts.yml": (
                "all:\n"  # 1
                "  hosts:\n"  # 2
                "    lonely:\n"  # 3
                "  children:\n"  # 4
                "    kiln_compute:\n"  # 5
                "      children:\n"  # 6
                "        rack1:\n"  # 7
                "          hosts:\n"  # 8
                "            gpu[01:02]:\n"  # 9
                "              kiln_rack: r1\n"  # 10
                "            gpu03:2222:\n"  # 11
            )
        },
    )
    assert errors(findings) == []
    assert sorted(hosts) == ["gpu01", "gpu02", "gpu03", "lonely"]
    assert hosts["gpu01"].groups == ["kiln_compute", "rack1"]
    assert hosts["lonely"].groups == ["ungrouped"]
    assert values(hosts["gpu02"]) == {"kiln_rack": "r1"}
    assert values(hosts["gpu03"]) == {"ansible_port": 2222}
    origin = hosts["gpu02"].vars["kiln_rack"].origin
    assert (origin.file, origin.line) == (tmp_path / "hosts.yml", 10)
    assert raw.hosts["gpu01"].declarations[0].line == 9
    assert raw.groups["kiln_compute"].children == ["rack1"]


def test_yaml_booleans_follow_yaml_1_1(tmp_path):
    """Ansible reads YAML 1.1: bare yes/on are booleans, quoted ones are strings."""
    _, hosts, _ = load(
        tmp_path,
        {"hosts.yml": "all:\n  hosts:\n    h1:\n      a: yes\n      b: 'yes'\n      c: on\n"},
    )
    assert values(hosts["h1"]) == {"a": True, "b": "yes", "c": True}


def test_yaml_duplicate_key_is_a_warning(tmp_path):
    _, hosts, findings = load(
        tmp_path, {"hosts.yml": "all:\n  hosts:\n    h1:\n      a: 1\n      a: 2\n"}
    )
    assert values(hosts["h1"]) == {"a": 2}
    (finding,) = findings
    assert finding.level is Level.WARNING and finding.origin.line == 5


# -- INI inventories -----------------------------------------------------------------------

INI = """\
# comment
; another comment
bare01 ansible_host=10.0.0.9

[kiln_controllers]
ctl01 ansible_host=10.0.0.1 ansible_port=2222

[kiln_compute:children]
rack1  # trailing comment

[rack1]   # rack 1, row A
gpu[01:02]:2200 kiln_gpu_count=8 big=1_000 ratio=1.5 flag=True word=text
gpu03 quoted="8" spaced="two words" lst="[1, 2]" dct="{'a': 1}" tup="(1, 2)" zeros=08 no=no

[rack1:vars]
kiln_rack=r1
count="8"
yes_word=yes
real_bool=False
with_comment=value # not a comment in a vars line
"""


def test_ini_as_ansible_reads_it(tmp_path):
    raw, hosts, findings = load(tmp_path, {"hosts": INI})
    assert errors(findings) == []
    assert sorted(hosts) == ["bare01", "ctl01", "gpu01", "gpu02", "gpu03"]
    assert hosts["bare01"].groups == ["ungrouped"]
    assert hosts["ctl01"].groups == ["kiln_controllers"]
    assert set(hosts["gpu01"].groups) == {"kiln_compute", "rack1"}
    assert raw.groups["kiln_compute"].children == ["rack1"]

    gpu01 = values(hosts["gpu01"])
    assert gpu01["ansible_port"] == 2200
    assert gpu01["kiln_gpu_count"] == 8
    assert gpu01["big"] == 1000
    assert gpu01["ratio"] == 1.5
    assert gpu01["flag"] is True
    assert gpu01["word"] == "text"
    assert values(hosts["ctl01"])["ansible_port"] == 2222

    # Host lines go through shlex (quotes removed), then ast.literal_eval.
    gpu03 = values(hosts["gpu03"])
    assert gpu03["quoted"] == 8
    assert gpu03["spaced"] == "two words"
    assert gpu03["lst"] == [1, 2]
    assert gpu03["dct"] == {"a": 1}
    assert gpu03["tup"] == [1, 2]
    assert gpu03["zeros"] == "08"
    assert gpu03["no"] == "no"
    assert "ansible_port" not in gpu03

    # [group:vars] lines are not shlex-split: the quotes stay, so "8" is a string.
    assert gpu03["count"] == "8"
    assert gpu03["yes_word"] == "yes"
    assert gpu03["real_bool"] is False
    assert gpu03["with_comment"] == "value # not a comment in a vars line"
    assert gpu03["kiln_rack"] == "r1"
    assert hosts["gpu03"].vars["count"].origin.line == 17
    assert hosts["gpu03"].vars["quoted"].origin.line == 13


def test_ini_errors_carry_lines(tmp_path):
    _, hosts, findings = load(
        tmp_path,
        {
            "hosts": (
                "[good]\n"  # 1
                "h1\n"  # 2
                "[bad group]\n"  # 3
                "h2\n"  # 4
                "[good:weird]\n"  # 5
                "h3\n"  # 6
                "[good:vars]\n"  # 7
                "novalue\n"  # 8
                "[good]\n"  # 9
                "h4 stray\n"  # 10
                "h5 q='unclosed\n"  # 11
            )
        },
    )
    lines = sorted((f.origin.line, f.message.split(":")[0]) for f in findings)
    assert [line for line, _ in lines] == [3, 5, 8, 10, 11]
    # The lines under a broken header are not silently given to the previous group.
    assert "h2" not in hosts and "h3" not in hosts
    assert sorted(hosts) == ["h1", "h4"]


# -- group_vars/ and host_vars/ ------------------------------------------------------------

HOSTS_YML = """\
all:
  children:
    kiln_compute:
      hosts:
        gpu01:
        gpu02:
"""


def test_vars_as_files_folders_and_json(tmp_path):
    _, hosts, findings = load(
        tmp_path,
        {
            "hosts.yml": HOSTS_YML,
            "group_vars/all.yml": "a: all-file\nshared: all\n",
            "group_vars/kiln_compute/10-first.yml": "b: first\nc: first\n",
            "group_vars/kiln_compute/20-second.yaml": "c: second\n",
            "group_vars/kiln_compute/nested/30-third.yml": "d: third\n",
            "group_vars/kiln_compute/skipped.txt": "c: never\n",
            "group_vars/kiln_compute/.hidden.yml": "c: never\n",
            "group_vars/kiln_compute/backup.yml~": "c: never\n",
            "host_vars/gpu01.json": '{"e": [1, 2], "shared": "host"}\n',
            "host_vars/gpu02": "e: no-extension\n",
        },
    )
    assert errors(findings) == []
    gpu01, gpu02 = values(hosts["gpu01"]), values(hosts["gpu02"])
    assert gpu01 == {
        "a": "all-file",
        "shared": "host",
        "b": "first",
        "c": "second",
        "d": "third",
        "e": [1, 2],
    }
    assert gpu02["e"] == "no-extension" and gpu02["shared"] == "all"
    assert hosts["gpu01"].vars["c"].origin.file.name == "20-second.yaml"
    assert hosts["gpu01"].vars["shared"].origin.file.name == "gpu01.json"


def test_vars_folder_wins_over_file_with_extension(tmp_path):
    """Ansible looks for <name>, <name>.yml, .yaml, .json and takes the first it finds."""
    _, hosts, _ = load(
        tmp_path,
        {
            "hosts.yml": HOSTS_YML,
            "group_vars/all/main.yml": "x: folder\n",
            "group_vars/all.yml": "x: file\ny: file\n",
            "group_vars/kiln_compute.yml": "z: yml\n",
            "group_vars/kiln_compute.yaml": "z: yaml\n",
        },
    )
    assert values(hosts["gpu01"]) == {"x": "folder", "z": "yml"}


def test_orphan_vars_file_is_a_warning(tmp_path):
    _, _, findings = load(
        tmp_path, {"hosts.yml": HOSTS_YML, "host_vars/gpu99.yml": "kiln_rack: r9\n"}
    )
    (finding,) = findings
    assert finding.level is Level.WARNING
    assert "host 'gpu99'" in finding.message


def test_non_utf8_vars_file_has_its_line(tmp_path):
    write_tree(tmp_path, {"hosts.yml": HOSTS_YML})
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_bytes(b"a: 1\nb: 2\nc: caf\xe9\n")
    collector = FindingCollector()
    read_inventory(tmp_path, collector)
    (finding,) = collector.findings
    assert "not UTF-8" in finding.message and finding.origin.line == 3


def test_malformed_json_vars_file(tmp_path):
    _, _, findings = load(
        tmp_path, {"hosts.yml": HOSTS_YML, "host_vars/gpu01.json": '{\n  "a": 1,\n}\n'}
    )
    (finding,) = findings
    assert "malformed JSON" in finding.message and finding.origin.line == 3


# -- precedence ----------------------------------------------------------------------------

PRECEDENCE_HOSTS = """\
all:
  vars:
    p1: all-inline
    p2: all-inline
    p3: all-inline
    p4: all-inline
    p5: all-inline
    p6: all-inline
  children:
    parent:
      vars:
        p1: parent-inline
        p2: parent-inline
        p3: parent-inline
        p4: parent-inline
        p5: parent-inline
      children:
        child:
          vars:
            p1: child-inline
            p2: child-inline
            p3: child-inline
          hosts:
            h1:
              p1: host-inline
              p6: host-inline
            h2:
"""


def test_precedence_order(tmp_path):
    """all inline < group inline (by depth) < group_vars/all < group_vars/<group> (by depth)
    < host inline < host_vars."""
    _, hosts, findings = load(
        tmp_path,
        {
            "hosts.yml": PRECEDENCE_HOSTS,
            "group_vars/all.yml": "p2: gv-all\np3: gv-all\np4: gv-all\np5: gv-all\n",
            "group_vars/parent.yml": "p3: gv-parent\np4: gv-parent\n",
            "group_vars/child.yml": "p3: gv-child\n",
            "host_vars/h1.yml": "p1: hv-h1\n",
        },
    )
    assert errors(findings) == []
    h1, h2 = values(hosts["h1"]), values(hosts["h2"])
    # Any group_vars/ file beats any group vars written in the hosts file, even a deeper one.
    assert h2["p2"] == "gv-all"
    # Among group_vars/ files, the deeper group wins.
    assert h2["p3"] == "gv-child"
    assert h2["p4"] == "gv-parent"
    assert h2["p5"] == "gv-all"
    # Among hosts-file group vars, the deeper group wins over 'all'.
    assert h2["p6"] == "all-inline"
    assert h2["p1"] == "child-inline"
    # Host vars beat every group var; host_vars/ beats the hosts file.
    assert h1["p6"] == "host-inline"
    assert h1["p1"] == "hv-h1"
    assert hosts["h1"].groups == ["parent", "child"]


def test_depth_is_the_longest_path(tmp_path):
    """A group reachable at depth 1 and at depth 2 sorts at depth 2 (Ansible's Group.depth)."""
    _, hosts, _ = load(
        tmp_path,
        {
            "hosts.yml": (
                "all:\n"
                "  children:\n"
                "    a_shallow:\n"
                "      hosts:\n"
                "        h1:\n"
                "    z_parent:\n"
                "      children:\n"
                "        a_shallow:\n"
                "        b_other:\n"
                "          hosts:\n"
                "            h1:\n"
            ),
            "group_vars/a_shallow.yml": "v: a_shallow\n",
            "group_vars/z_parent.yml": "v: z_parent\n",
        },
    )
    # Depth: z_parent 1, a_shallow 2 (through z_parent): a_shallow wins despite its name.
    assert values(hosts["h1"])["v"] == "a_shallow"
    assert hosts["h1"].groups == ["z_parent", "a_shallow", "b_other"]


def test_same_depth_sorts_by_name(tmp_path):
    _, hosts, _ = load(
        tmp_path,
        {
            "hosts.yml": "all:\n  children:\n    alpha:\n      hosts:\n        h1:\n"
            "    beta:\n      hosts:\n        h1:\n",
            "group_vars/alpha.yml": "v: alpha\n",
            "group_vars/beta.yml": "v: beta\n",
        },
    )
    assert values(hosts["h1"])["v"] == "beta"


@pytest.mark.parametrize("fmt", ["yaml", "ini"])
def test_ansible_group_priority(tmp_path, fmt):
    """A higher ansible_group_priority sorts a group later among its depth, so it wins."""
    if fmt == "yaml":
        files = {
            "hosts.yml": "all:\n  children:\n"
            "    alpha:\n      vars:\n        ansible_group_priority: 10\n        v: alpha\n"
            "      hosts:\n        h1:\n"
            "    beta:\n      vars:\n        v: beta\n      hosts:\n        h1:\n"
        }
    else:
        files = {
            "hosts": "[alpha]\nh1\n[beta]\nh1\n"
            "[alpha:vars]\nansible_group_priority=10\nv=alpha\n[beta:vars]\nv=beta\n"
        }
    files["group_vars/alpha.yml"] = "w: alpha\n"
    files["group_vars/beta.yml"] = "w: beta\n"
    raw, hosts, findings = load(tmp_path, files)
    assert errors(findings) == []
    assert raw.groups["alpha"].priority == 10
    assert values(hosts["h1"])["v"] == "alpha"
    assert values(hosts["h1"])["w"] == "alpha"
    assert hosts["h1"].groups == ["beta", "alpha"]


def test_bad_group_priority_is_an_error(tmp_path):
    _, _, findings = load(
        tmp_path,
        {
            "hosts.yml": "all:\n  children:\n    g:\n      vars:\n"
            "        ansible_group_priority: x\n"
        },
    )
    assert errors(findings) == ["ansible_group_priority must be a whole number"]


def test_children_cycle_is_an_error(tmp_path):
    _, _, findings = load(
        tmp_path,
        {"hosts": "[a:children]\nb\n[b:children]\na\n[a]\nh1\n"},
    )
    assert any("its own ancestor" in message for message in errors(findings))


def test_several_sources_in_one_directory(tmp_path):
    """Every inventory file of the directory is read, in name order; later ones add to it."""
    _, hosts, findings = load(
        tmp_path,
        {
            "01-hosts.yml": "all:\n  children:\n    g:\n      hosts:\n"
            "        h1:\n          v: 1\n",
            "02-more": "[g]\nh2\n[g:vars]\nw=2\n",
            "README.md": "not an inventory\n",
        },
    )
    assert errors(findings) == []
    assert sorted(hosts) == ["h1", "h2"]
    assert values(hosts["h1"]) == {"v": 1, "w": 2}


def test_ini_children_must_be_defined(tmp_path):
    """Ansible refuses an INI file whose [g:children] or [g:vars] names an undefined group."""
    _, _, findings = load(
        tmp_path,
        {
            "hosts": (
                "[parent:children]\n"  # 1
                "defined_later\n"  # 2
                "never_defined\n"  # 3
                "[orphan:vars]\n"  # 4
                "x=1\n"  # 5
                "[defined_later]\n"  # 6
                "h1\n"  # 7
                "[late_vars:vars]\n"  # 8
                "y=2\n"  # 9
                "[late_vars]\n"  # 10
            )
        },
    )
    found = sorted((f.origin.line, f.key) for f in findings if f.level is Level.ERROR)
    assert found == [(3, "never_defined"), (4, "orphan")]


def test_extensionless_yaml_file_is_read_as_yaml(tmp_path):
    """Ansible tries its yaml plugin before ini on a file without an extension."""
    _, hosts, findings = load(
        tmp_path,
        {"hosts": "all:\n  children:\n    g:\n      hosts:\n        h1:\n          v: 1\n"},
    )
    assert errors(findings) == []
    assert list(hosts) == ["h1"]
    assert hosts["h1"].groups == ["g"]
    assert values(hosts["h1"]) == {"v": 1}
