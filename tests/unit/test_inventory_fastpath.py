"""The fast paths of `kiln validate` and `kiln plan` (issue 21) behave as the slow ones did.

YAML scalars built without construct_object read as PyYAML's SafeLoader reads them and keep
their lines; errors on those values are still all reported at once at file:line; the Cluster's
cached selections hand out lists of their own; make_plan splits each distinct host list into
shards once and every stage gets exactly what plan_shards gives it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from kiln.examples import write_example
from kiln.inventory import load_cluster, require_valid
from kiln.inventory.yamlfile import LocatedDict, VaultValue, load_yaml
from kiln.plan import PlanOptions, make_plan
from kiln.plan.shards import plan_shards

SCALARS = """\
plain: gpu001
quoted: "010"
single: 'yes'
octal: 010
hex: 0x1f
int: 42
negative: -7
float: 1.5
exp: 1e3
inf: .inf
yes_word: yes
Off_word: Off
true_word: true
tilde: ~
null_word: null
empty:
date: 2026-12-01
address: 10.1.0.1
version: "12.8"
bare_version: 12.8
anchored: &addr 10.2.0.1
aliased: *addr
list: [mlx5_0, 8, no]
1: integer key
on: boolean key
flow: {ansible_host: 10.1.0.1, kiln_gpu_count: 8, kiln_bmc_address: null}
nested:
  block: &block
    x: 1
  again: *block
"""


def test_scalars_read_as_safe_loader_reads_them():
    fast = load_yaml(SCALARS)
    assert fast == yaml.safe_load(SCALARS)
    plain = yaml.safe_load(SCALARS)
    for key, value in fast.items():  # the same types too: 1 is not True, "8" is not 8
        expected = dict if isinstance(value, LocatedDict) else type(value)
        assert type(plain[key]) is expected, key
    assert fast["octal"] == 8 and fast["yes_word"] is True and fast["Off_word"] is False
    assert fast["quoted"] == "010" and fast["single"] == "yes" and fast["empty"] is None
    assert fast["aliased"] == "10.2.0.1" and fast["nested"]["again"] == {"x": 1}
    assert True in fast and 1 in fast  # `on:` is a boolean key, `1:` an integer one


def test_lines_are_kept_on_the_fast_path():
    data = load_yaml(SCALARS)
    assert isinstance(data, LocatedDict) and data.line == 1
    assert data.key_lines["plain"] == 1 and data.key_lines["address"] == 18
    flow = data["flow"]
    assert isinstance(flow, LocatedDict) and flow.line == 26
    assert flow.key_lines == {"ansible_host": 26, "kiln_gpu_count": 26, "kiln_bmc_address": 26}
    assert data["nested"].key_lines == {"block": 28, "again": 30}


def test_kiln_tags_still_take_the_slow_path():
    data = load_yaml(
        "secret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\nraw: !unsafe '{{ x }}'\n"
    )
    assert isinstance(data["secret"], VaultValue)
    assert data["secret"].ciphertext.startswith("$ANSIBLE_VAULT")
    assert data["raw"] == "{{ x }}"


def test_errors_on_fast_path_values_all_carry_file_and_line(tmp_path):
    inventory = tmp_path / "inv"
    write_example(inventory, 10)
    hosts = inventory / "hosts.yml"
    text = hosts.read_text()
    good = "gpu005: {ansible_host: 10.1.0.5, kiln_bmc_address: 10.2.0.5}"
    assert good in text
    line = text[: text.index(good)].count("\n") + 1
    hosts.write_text(text.replace(good, good[:-1] + ", kiln_gpu_count: eight, kiln_sockets: yes}"))
    result = load_cluster(inventory)
    assert not result.ok
    found = {(f.key, f.origin.file.name, f.origin.line) for f in result.errors}
    assert found == {("kiln_gpu_count", "hosts.yml", line), ("kiln_sockets", "hosts.yml", line)}
    assert any("boolean" in f.message for f in result.errors)  # `yes` still read as True


def test_cluster_selections_are_cached_but_handed_out_fresh(tmp_path):
    write_example(tmp_path / "inv", 40)
    cluster = require_valid(tmp_path / "inv")
    controllers = cluster.controllers
    controllers.clear()
    assert [n.name for n in cluster.controllers] == ["slurm-ctl01"]
    compute = cluster.compute
    compute.pop()
    assert len(cluster.compute) == 40
    assert cluster.compute == [n for n in cluster.nodes if n.is_compute]
    assert cluster.gpu_total == sum(n.gpu_count for n in cluster.nodes if n.is_compute) == 320


def test_each_stage_gets_the_shards_plan_shards_gives(tmp_path: Path):
    write_example(tmp_path / "inv", 100)
    cluster = require_valid(tmp_path / "inv")
    skip = {"nvidia": frozenset({"gpu001", "gpu050"})}  # one stage on other hosts
    for shard_by in ("rack_group", "rack", "count"):
        options = PlanOptions(shard_by=shard_by, shard_size=40, skip=skip)
        plan = make_plan(cluster, options, tmp_path / "state")
        assert {len(stage.hosts) for stage in plan.stages} == {98, 100, 101}
        for stage in plan.stages:
            expected = plan_shards(
                cluster,
                list(stage.hosts),
                shard_by=shard_by,
                shard_size=40,
                workers=(),
                batch_size=plan.rollout.batch_size,
            )
            assert list(stage.shards) == expected, (shard_by, stage.name)
