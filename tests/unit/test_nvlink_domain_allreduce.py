"""The rack-scale all-reduce (#32): burn-in runs an all-reduce across each NVLink domain's trays
(an NVL72 rack) where the profile has a rack-scale floor, lets NCCL choose its algorithm (not
the forced ring of the fabric and pair jobs) and sweeps to 8 GiB; judging holds the result to the
profile's floor (80 % of a real GB200 NVL72 rack's 834.57 GB/s at 8 GiB) and names the domain
when it is slow, draining no tray on that figure alone."""

from __future__ import annotations

from pathlib import Path

import yaml
from test_nvlink_blocks import nvl72_inventory

from kiln.burnin import campaign as C
from kiln.burnin import jobs as J
from kiln.burnin.suites import resolve_suite
from kiln.inventory import load_cluster
from kiln.judging.model import BurninReport
from kiln.judging.rules_allreduce import judge_allreduce
from kiln.judging.table import AllreduceRow
from kiln.judging.thresholds import FABRIC_BYTES, NVLINK_DOMAIN, floors_for
from kiln.judging.verdicts import Action
from kiln.profiles import get_profile


def gb200_cluster(root: Path, racks: dict[str, int]):
    inventory = nvl72_inventory(root, racks)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    for vars_ in hosts["all"]["children"]["kiln_compute"]["hosts"].values():
        vars_.update(kiln_gpu_model="gb200", kiln_gpu_count=4)
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return load_cluster(inventory).cluster


def test_the_profile_floor_comes_from_a_real_nvl72_rack():
    floors = floors_for(get_profile("gb200"))
    assert floors.allreduce_domain_busbw_gbs == 670  # 80 % of 834.57 GB/s at 8 GiB
    assert floors.to_dict()["allreduce_domain_busbw_gbs"] == 670
    assert floors_for(get_profile("gb300")).allreduce_domain_busbw_gbs == 670
    # A profile of no rack keeps its report unchanged: no such key.
    assert "allreduce_domain_busbw_gbs" not in floors_for(get_profile("h100-sxm")).to_dict()


def test_a_job_per_domain_of_two_or_more_trays_nccl_choosing_its_algorithm(tmp_path):
    cluster = gb200_cluster(tmp_path, {"rack-a": 3, "cluster.uuid/1": 2, "lonely": 1})
    names = [n.name for n in cluster.compute]
    suite = resolve_suite(cluster.burnin)
    outcome = C.BurninOutcome("RUN", tmp_path, suite, names, BurninReport(cluster.name))
    campaign = C._Campaign(cluster, C.BurninOptions(), None, outcome, lambda _: None, {})
    jobs = campaign._domain_jobs()
    assert [(j.name, j.nodes) for j in jobs] == [
        ("domain-cluster.uuid_1", ("gb201", "gb202")),
        ("domain-rack-a", ("gb101", "gb102", "gb103")),
    ]
    script = jobs[1].script
    assert "--nodes=3" in script and "--nodelist=gb[101-103]" in script
    assert "allreduce_launch --ntasks-per-node 4 " in script
    assert "--ring" not in script and f"--max-bytes {FABRIC_BYTES}" in script
    assert 'save "$out/allreduce/domain-rack-a.json"' in script
    # The fabric ring still forces the ring.
    assert "--ring" in J.allreduce_job("RUN", "res", outcome.suite, "fabric-ring",
                                       ["gb101", "gb201"], gpus=4).script  # fmt: skip


def row(hosts: list[str], busbw_8g: float) -> AllreduceRow:
    return AllreduceRow(",".join(hosts), str(4 * len(hosts)), "nccl-tests", str(FABRIC_BYTES),
                        str(busbw_8g), "1", "0", "0", "8589934592", str(busbw_8g))  # fmt: skip


def test_a_slow_domain_is_named_for_investigation_and_no_tray_is_drained(tmp_path):
    cluster = gb200_cluster(tmp_path, {"rack-a": 2, "rack-b": 2})
    report = BurninReport(cluster.name)
    jobs = [("domain-rack-a", row(["gb101", "gb102"], 834.57)),
            ("domain-rack-b", row(["gb201", "gb202"], 512.0))]  # fmt: skip
    judge_allreduce(report, cluster, None, jobs, lambda model: floors_for(get_profile(model)))
    verdicts = {v.name: v for v in report.verdicts if v.check == "allreduce_domain"}
    assert verdicts["domain-rack-a"].passed and verdicts["domain-rack-a"].measured == 834.57
    slow = verdicts["domain-rack-b"]
    assert (slow.passed, slow.threshold, slow.action, slow.rule) == (
        False, 670, Action.INVESTIGATE, NVLINK_DOMAIN)  # fmt: skip
    assert slow.message == (
        "allreduce (nccl-tests) 512 GB/s across NVLink domain rack-b < 670 (gb200)"
    )
    assert report.drain() == {}
