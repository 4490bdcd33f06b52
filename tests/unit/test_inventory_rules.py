"""Inventory rules one at a time: each is a function over a context that adds findings.

The corpus (test_validate_corpus.py) checks what `kiln validate` reports as a whole; these call
a single rule on a small inventory, so a rule can be read and tested without the others.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import shutil
from pathlib import Path

from kiln.inventory import rules as rules_package
from kiln.inventory.context import InventoryContext, read_context
from kiln.inventory.findings import FindingCollector
from kiln.inventory.rules import RULES, cluster, connection, fabric, hosts, partitions
from kiln.inventory.rules import platform as platform_rules
from kiln.inventory.rules import slurm as slurm_rules

FABRIC = Path(__file__).parent.parent / "fixtures" / "fabric"

HOSTS = """\
all:
  children:
    kiln_controllers:
      hosts:
        ctl01: {ansible_host: 10.0.0.1}
    kiln_compute:
      vars: {kiln_gpu_model: h100-sxm}
      hosts:
        gpu01: {ansible_host: 10.0.1.1, kiln_bmc_address: 10.9.0.1}
        gpu02: {ansible_host: 10.0.1.2, kiln_bmc_address: 10.9.0.1}
        Gpu_03: {ansible_host: 10.0.1.3}
"""


def context(root: Path, files: dict[str, str]) -> InventoryContext:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    ctx = read_context(root, FindingCollector())
    assert ctx is not None
    return ctx


def findings(rule, ctx: InventoryContext, *args) -> list[tuple[str, str, str, list[str]]]:
    out = FindingCollector()
    rule(ctx, *args, out)
    return [
        (str(f.level), f.origin.display(ctx.raw.root), f.message, f.hosts) for f in out.findings
    ]


def test_a_host_rule_judges_the_host_it_is_given(tmp_path):
    ctx = context(tmp_path, {"hosts.yml": HOSTS})
    assert findings(hosts.name_is_a_label, ctx, ctx.hosts["gpu01"]) == []
    assert findings(hosts.name_is_a_label, ctx, ctx.hosts["Gpu_03"]) == [
        ("error", "hosts.yml:11", "host name 'Gpu_03' is not a valid RFC 1123 label", [])
    ]


def test_a_cluster_rule_alone(tmp_path):
    ctx = context(tmp_path, {"hosts.yml": HOSTS})
    assert findings(cluster.bmc_addresses_are_unique, ctx) == [
        ("error", "hosts.yml:10", "hosts gpu01, gpu02 share the BMC address 10.9.0.1", [])
    ]
    assert findings(cluster.host_addresses_are_unique, ctx) == []
    assert findings(cluster.has_a_controller, ctx) == []


def test_a_partition_rule_sees_the_partitions_before_it(tmp_path):
    ctx = context(
        tmp_path,
        {
            "hosts.yml": HOSTS,
            "group_vars/all.yml": "kiln_partitions:\n"
            "  - {name: gpu, groups: [kiln_compute]}\n"
            "  - {name: gpu, nodes: [gpu01]}\n",
        },
    )
    first, second = (
        partitions.WrittenPartition(i, spec, ctx.written_at("kiln_partitions", i))
        for i, spec in enumerate(ctx.partition_specs)
    )
    assert findings(partitions.defined_once, ctx, first) == []
    assert findings(partitions.defined_once, ctx, second) == [
        ("error", "group_vars/all.yml:3", "partition 'gpu' is defined twice", [])
    ]


def test_the_fabric_capture_is_read_once_and_judged_by_its_own_rules(tmp_path):
    root = tmp_path / "inv"
    shutil.copytree(FABRIC / "inventory-3level", root)
    shutil.copy(FABRIC / "three_level_fat_tree.ibnetdiscover", root / "fabric.txt")
    with (root / "group_vars" / "all.yml").open("a") as all_vars:
        all_vars.write("kiln_slurm:\n  topology: fabric\n  ibnetdiscover_file: fabric.txt\n")
    ctx = context(root, {})
    assert ctx.capture is ctx.capture and ctx.capture.fabric is not None  # parsed once, kept
    assert findings(fabric.capture_is_ibnetdiscover_output, ctx) == []
    assert findings(fabric.capture_is_hidden_from_ansible, ctx) == []  # *.txt: Ansible skips it
    ((level, where, message, _),) = findings(fabric.capture_holds_the_compute_nodes, ctx)
    assert (level, where) == ("warning", "group_vars/all.yml:12")
    assert message.startswith("the fabric capture fabric.txt lacks 1 compute node(s): gpu017;")


def test_every_rule_written_is_registered_once():
    """Every public function of every module under kiln.inventory.rules (a new module too)."""
    registered = [rule for entry in RULES for rule in getattr(entry, "rules", (entry,))]
    modules = [
        importlib.import_module(f"{rules_package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(rules_package.__path__)
    ]
    assert {hosts, cluster, partitions, fabric, connection, platform_rules, slurm_rules} <= set(
        modules
    )
    written = [
        function
        for module in modules
        for name, function in inspect.getmembers(module, inspect.isfunction)
        if function.__module__ == module.__name__ and not name.startswith("_")
    ]
    assert len(registered) == len(set(registered))
    assert set(registered) == set(written)


def test_connection_variables_that_run_commands_on_the_controller_are_warnings(tmp_path):
    """Allowed (a bastion's ProxyCommand, a local controller) but shown: key, place, hosts."""
    ctx = context(
        tmp_path,
        {
            "hosts.yml": HOSTS,
            "group_vars/kiln_compute.yml": (
                "ansible_ssh_common_args: >-\n  -o ProxyCommand='ssh -W %h:%p bastion'\n"
            ),
            "host_vars/ctl01.yml": (
                "ansible_connection: local\nansible_python_interpreter: /opt/py/bin/python3\n"
            ),
        },
    )
    assert findings(connection.commands_run_on_the_controller, ctx) == [
        (
            "warning",
            "group_vars/kiln_compute.yml:1",
            "ansible_ssh_common_args holds a ProxyCommand, a command run on the controller "
            "(hosts gpu01, gpu02, Gpu_03)",
            [],
        ),
        (
            "warning",
            "host_vars/ctl01.yml:1",
            "ansible_connection is 'local': this host's tasks run on the controller (host ctl01)",
            [],
        ),
        (
            "warning",
            "host_vars/ctl01.yml:2",
            "ansible_python_interpreter '/opt/py/bin/python3' with a local connection is a "
            "program run on the controller (host ctl01)",
            [],
        ),
    ]
    plain = context(tmp_path / "plain", {"hosts.yml": HOSTS})
    assert findings(connection.commands_run_on_the_controller, plain) == []
