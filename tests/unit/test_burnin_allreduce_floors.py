"""All-reduce floors by scope: inside a node the profile's NVLink/PCIe floor; across nodes
rails x link rate x efficiency from what the nodes declare; without rails, the fleet only.

Judged against recorded real nccl-tests runs (tests/fixtures/real/nccl-tests-all_reduce_perf):
healthy two-node H100 and A100 rings, a two-node H100 fabric far below its eight NDR rails, a
128-node H100 ring, single 8-GPU nodes; and a derived run with #wrong values."""

from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from captures import shared_capture
from kiln.inventory import require_valid
from kiln.judging import Action, Severity, judge
from kiln.judging.results import allreduce_from_doc, allreduce_from_nccl
from kiln.judging.thresholds import (
    FABRIC_BYTES,
    FLEET,
    INTRA_NODE,
    RAILS,
    inter_node_floor,
    node_network_gbs,
)
from kiln.parsers.nccl_tests import parse_text
from kiln.profiles import get_profile
from kiln.report import render

FIXTURES = Path(__file__).parents[1] / "fixtures"
REAL = FIXTURES / "real" / "nccl-tests-all_reduce_perf"
DERIVED = FIXTURES / "derived" / "nccl-tests-all_reduce_perf"
SUPERBENCH = shared_capture(
    "nccl-tests-all_reduce_perf/a100_sxm4_40gb_8gpu_single_node_superbench.txt"
)
DOCS = Path(__file__).parents[2] / "docs" / "burnin.md"
NDR8 = [f"mlx5_{i}" for i in range(8)]
GIB = 1 << 30


def inventory(root: Path, nodes, *, model="h100-sxm", hcas=NDR8, rate=400, extra="") -> Path:
    hosts = "".join(f"        {n}:\n          ansible_host: 10.0.{i // 250}.{i % 250 + 1}\n"
                    for i, n in enumerate(nodes))  # fmt: skip
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(
        "---\nall:\n  children:\n    kiln_controllers:\n      hosts:\n        ctl01:\n"
        "          ansible_host: 10.9.0.2\n    kiln_compute:\n      vars:\n"
        f"        kiln_gpu_model: {model}\n        kiln_ib_hcas: {json.dumps(hcas)}\n"
        "      hosts:\n" + hosts
    )
    (root / "group_vars" / "all.yml").write_text(
        f"---\nkiln_cluster_name: floors\nansible_user: root\nkiln_ib:\n  link_rate_gbps: {rate}\n"
        + extra
    )
    return root


def cluster(tmp_path, nodes=("gpu001", "gpu002"), **kwargs):
    return require_valid(inventory(tmp_path / "inventory", nodes, **kwargs))


def ring(hosts, busbw, *, size=8 * GIB, gpus=8, **extra):
    """A fabric all-reduce document as the torch workload prints it (one row)."""
    doc = {
        "kind": "allreduce",
        "hosts": [h for h in hosts for _ in range(gpus)],
        "world_size": gpus * len(hosts),
        "rows": [{"bytes": size, "busbw_gbs": busbw, "algbw_gbs": busbw / 1.875, "time_us": 1.0}],
        "verdict_bytes": size,
        "verdict_busbw_gbs": busbw,
        "correct": True,
        "nccl_algo": "Ring",
        **extra,
    }
    return allreduce_from_doc("fabric-ring", doc)


def real(name: str | Path, job: str = "fabric-ring"):
    """A recorded nccl-tests run (a name in REAL, or a shared capture's path); `srun --label`
    prefixes (" 0: ") taken off first."""
    text = (REAL / name).read_text()
    return allreduce_from_nccl(job, parse_text(re.sub(r"(?m)^ *\d+: ?", "", text)))


def by_check(report, check):
    return [v for v in report.verdicts if v.check == check]


# ----------------------------------------------------------------- reproduced (issue 16)


def test_two_h100_nodes_at_340_gbs_on_eight_ndr_rails_pass(tmp_path):
    # Issue 16: 2 x 8 H100 over 8 x 400 Gb/s rails reach about 340 GB/s busbw. The ring is bounded
    # by each node's network (8 x 400 / 8 = 400 GB/s), so the NVLink floor (380) can never be met.
    report = judge(cluster(tmp_path), {}, [ring(["gpu001", "gpu002"], 340.0)])
    assert report.passed, [v.message for v in report.failures]
    [pair] = by_check(report, "allreduce_pairs")[:1]
    assert (pair.threshold, pair.rule) == (300, RAILS)


def test_two_h100_nodes_clearly_below_the_derived_floor_fail(tmp_path):
    report = judge(cluster(tmp_path), {}, [ring(["gpu001", "gpu002"], 200.0)])
    [link] = report.failures
    assert (link.check, link.name, link.threshold, link.rule) == (
        "allreduce_link",
        "gpu001<->gpu002",
        300,
        RAILS,
    )
    assert link.action is Action.INVESTIGATE  # two nodes: a node cannot be told from its link
    assert "200 GB/s < 300 (8 x 400 Gb/s x 0.75); two nodes only" in link.message


# ----------------------------------------------------------------- the formula


def test_the_floor_is_rails_times_rate_over_eight_times_the_efficiency():
    assert node_network_gbs(8, 400) == 400  # 8 x NDR: 400 GB/s each way
    assert node_network_gbs(8, 200) == 200  # 8 x HDR
    assert node_network_gbs(16, 100) == 200  # 16 x 100G RoCE (OCI BM.GPU4.8)


def test_the_docs_table_holds_the_formula_s_figures():
    text = DOCS.read_text()
    for rails, rate in ((8, 400), (8, 200), (4, 400)):
        raw = node_network_gbs(rails, rate)
        row = f"| {rails} x {rate} Gb/s | {raw:g} GB/s | {raw * 0.75:g} GB/s |"
        assert row in text, row
    assert "busbw = algbw x 2(n-1)/n" in text
    for profile in ("h100-sxm", "h200-sxm", "b200"):  # next to each profile's intra-node floor
        intra = get_profile(profile).burnin_floors.allreduce_busbw_gbs
        assert f"| `{profile}` | {intra:g} GB/s | 300 GB/s | 150 GB/s |" in text


# ----------------------------------------------------------------- real captures


def test_a_real_two_node_h100_run_at_339_gbs_passes_on_eight_ndr_rails(tmp_path):
    result = real("h100_80gb_hbm3_2node_16gpu_gcp_a3mega.txt")
    nodes = result.hosts
    report = judge(cluster(tmp_path, nodes), {}, [result])
    assert report.passed, [v.message for v in report.failures]
    assert result.busbw_at(FABRIC_BYTES) == (FABRIC_BYTES, 338.82)
    # The same run at 1 GiB did 297.86: why the rule reads a fixed large size, not any size.
    assert result.busbw_at(GIB)[1] < 300


def test_a_real_two_node_a100_roce_run_passes_on_sixteen_100g_rails(tmp_path):
    result = real("a100_sxm4_40gb_2node_16gpu_oci_roce.txt")
    hcas = [f"mlx5_{i}" for i in range(16)]
    c = cluster(tmp_path, result.hosts, model="a100-sxm-40g", hcas=hcas, rate=100)
    report = judge(c, {}, [result])
    assert report.passed, [v.message for v in report.failures]
    [pair] = [v for v in by_check(report, "allreduce_pairs")][:1]
    assert (pair.threshold, pair.rule) == (150, RAILS)  # 16 x 100 / 8 x 0.75; it did 191.76


@pytest.mark.parametrize(
    ("capture", "busbw"),
    [
        ("h100_80gb_2node_16gpu_ndr400_ring_srun_label_issue290.txt", 89.9),
        ("h100_80gb_2node_16gpu_ndr400_default_algo_srun_label_issue290.txt", 155.57),
    ],
)
def test_a_real_h100_fabric_far_below_its_eight_ndr_rails_fails(tmp_path, capture, busbw):
    result = real(capture)
    assert result.hosts == ("node005", "node007")
    report = judge(cluster(tmp_path, result.hosts), {}, [result])
    [link] = report.failures
    assert link.check == "allreduce_link" and link.rule == RAILS
    assert (link.measured, link.threshold) == (busbw, 300)
    assert report.drain() == {}  # two nodes: nobody drained for a link, a person looks


def test_a_real_128_node_h100_ring_is_judged_at_8_gib(tmp_path):
    # Issue #322's run: 1024 ranks on hosts HCA-1..HCA-128 (the quoted device list stops early,
    # so the hosts are given here).
    result = real("h100_80gb_128node_ring_1g_to_16g_trimmed_issue322.txt")
    nodes = tuple(f"hca-{i}" for i in range(1, 129))  # inventory names are lower case
    result = dataclasses.replace(result, hosts=nodes, world_size=1024)
    report = judge(cluster(tmp_path, nodes), {}, [result])
    [fabric] = by_check(report, "allreduce_fabric")
    assert fabric.passed and (fabric.measured, fabric.threshold) == (364.57, 300)
    assert result.busbw_at(GIB)[1] == 110.84  # a 1 GiB ring of 1024 ranks is nowhere near it


def test_a_real_single_h100_node_meets_its_intra_node_floor(tmp_path):
    result = real("h100_80gb_8gpu_single_node_nvls_issue290.txt", job="node-node005")
    report = judge(cluster(tmp_path, ("node005",)), {}, [result])
    [node] = by_check(report, "allreduce_node")
    assert node.passed and (node.measured, node.threshold, node.rule) == (473.6, 380, INTRA_NODE)


def test_a_real_single_a100_40gb_node_meets_its_intra_node_floor(tmp_path):
    result = real(SUPERBENCH, job="node-localhost")
    report = judge(cluster(tmp_path, ("localhost",), model="a100-sxm-40g"), {}, [result])
    [node] = by_check(report, "allreduce_node")
    assert node.passed and (node.measured, node.threshold) == (235.26, 185)


# ----------------------------------------------------------------- without rails


def test_nodes_without_rails_get_the_fleet_relative_rule_only(tmp_path):
    nodes = ("gpu001", "gpu002", "gpu003", "gpu004")
    c = cluster(tmp_path, nodes, hcas=[])
    healthy = [ring([a, b], 380.0) for a, b in (("gpu001", "gpu002"), ("gpu003", "gpu004"))]
    slow = [ring([a, b], 90.0) for a, b in (("gpu001", "gpu003"), ("gpu002", "gpu003"))]
    jobs = [dataclasses.replace(r, job=f"pair-{i}") for i, r in enumerate(healthy + slow)]
    report = judge(c, {}, [ring(nodes, 120.0), *jobs])
    [fabric] = by_check(report, "allreduce_fabric")
    assert fabric.passed and fabric.threshold is None and fabric.rule == FLEET
    assert "no floor (gpu001 (+3 more) declares no rails (kiln_ib_hcas))" in fabric.message
    assert {v.rule for v in by_check(report, "allreduce_pairs")} == {FLEET}
    assert {v.name for v in report.failures} == {"gpu003"}  # slow with both of its partners


def test_one_node_without_rails_leaves_the_ring_to_the_fleet(tmp_path):
    c = cluster(tmp_path, ("gpu001", "gpu002", "gpu003"))
    bare = c.model_copy(
        update={
            "nodes": tuple(
                n.model_copy(update={"ib_hcas": ()}) if n.name == "gpu003" else n for n in c.nodes
            )
        }
    )
    floor = inter_node_floor(bare.compute, 400)
    assert (floor.gbs, floor.rule) == (None, FLEET)
    assert floor.basis == "gpu003 declares no rails (kiln_ib_hcas)"
    assert inter_node_floor(c.compute, None).basis == "kiln_ib.link_rate_gbps is not set"
    four = [n.model_copy(update={"ib_hcas": n.ib_hcas[:4]}) for n in c.compute[:1]]
    assert inter_node_floor([*four, *c.compute[1:]], 400).gbs == 150  # the fewest rails bound it


# ----------------------------------------------------------------- correctness, implementation


def test_wrong_values_from_nccl_tests_fail_naming_it(tmp_path):
    text = (DERIVED / "h100_2node_16gpu_wrong_values.txt").read_text()
    result = allreduce_from_nccl("fabric-ring", parse_text(text))
    assert (result.implementation, result.wrong, result.correct) == ("nccl-tests", 24, False)
    report = judge(cluster(tmp_path, result.hosts), {}, [result])
    [wrong] = by_check(report, "allreduce_correct")
    assert not wrong.passed and wrong.severity is Severity.CRITICAL
    assert wrong.message == "allreduce (nccl-tests) 24 wrong values (#wrong) in fabric-ring"
    assert wrong.measured == 24


def test_a_wrong_count_fails_even_where_the_document_says_correct(tmp_path):
    doc = ring(["gpu001"], 470.0, implementation="nccl-tests", wrong=3)
    result = dataclasses.replace(doc, job="node-gpu001")
    report = judge(cluster(tmp_path, ("gpu001",)), {}, [result])
    assert report.drain() == {
        "gpu001": "kiln: allreduce (nccl-tests) 3 wrong values (#wrong) in node-gpu001"
    }


def test_results_recorded_before_nccl_tests_still_read():
    old = ring(["gpu001", "gpu002"], 340.0)  # no implementation, no wrong
    assert (old.implementation, old.wrong) == ("torch", 0)
    new = ring(["gpu001", "gpu002"], 340.0, implementation="nccl-tests", wrong=0)
    assert new.implementation == "nccl-tests"


def test_every_report_format_says_which_rule_judged_and_which_implementation_ran(tmp_path):
    result = real("h100_80gb_2node_16gpu_ndr400_ring_srun_label_issue290.txt")
    report = judge(cluster(tmp_path, result.hosts), {}, [result])
    doc = json.loads(render(report, "json"))
    assert {v["rule"] for v in doc["verdicts"] if v["check"] == "allreduce_link"} == {RAILS}
    assert doc["allreduce"][0]["implementation"] == "nccl-tests"
    assert doc["allreduce"][0]["wrong"] == 0
    table = render(report, "table", width=220)
    assert "rails x rate x efficiency" in table and "nccl-tests" in table
    html = render(report, "html")
    assert "rails x rate x efficiency" in html and "nccl-tests" in html
    root = ET.fromstring(render(report, "junit"))
    failure = next(root.iter("failure"))
    assert "rule: rails x rate x efficiency" in failure.text
