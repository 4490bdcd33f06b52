"""Burn-in's pairwise pass (kiln.burnin.pairwise): the rounds it asks for after a slow fabric
ring, on sandbox-shaped inventories (CPU nodes, no rails, so the pairs are judged against the
fleet: the median of round one's pairs less the profile's 50 %)."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from kiln.burnin.pairwise import PairwisePass
from kiln.inventory import require_valid
from kiln.judging.pairs import pair_schedule
from kiln.judging.thresholds import floors_for
from kiln.profiles import get_profile

SANDBOX = Path(__file__).resolve().parents[2] / "inventories" / "sandbox"
FAST, SLOW = 100.0, 1.0


def cluster_of(tmp_path: Path, count: int):
    """The sandbox inventory with kiln-node01..count, one rack (one leaf)."""
    inventory = tmp_path / f"inv{count}"
    shutil.copytree(SANDBOX, inventory)
    hosts = inventory / "hosts.yml"
    hosts.write_text(hosts.read_text() + "".join(
        f"        kiln-node{i:02d}:\n          ansible_host: 172.31.250.{10 + i}\n"
        f"          kiln_rack: sandbox\n          kiln_gpu_model: none\n"
        f"          kiln_gpu_count: 0\n"
        for i in range(3, count + 1)
    ))  # fmt: skip
    cluster = require_valid(inventory)
    floors = functools.cache(lambda model: floors_for(get_profile(model), cluster.burnin))
    return cluster, [n.name for n in cluster.compute], floors


def measured(pairs, slow: str) -> dict:
    return {p: SLOW if slow in p else FAST for p in pairs}


def run(pass_: PairwisePass, slow: str) -> list[list[tuple[str, str]]]:
    rounds, pairs = [], pass_.first()
    while pairs:
        rounds.append(pairs)
        pass_.record(measured(pairs, slow))
        pairs = pass_.next()
    return rounds


def test_a_slow_node_is_met_twice_and_its_partner_cleared_in_two_rounds(tmp_path):
    cluster, nodes, floors = cluster_of(tmp_path, 8)
    rounds = run(PairwisePass(cluster, nodes, floors), "kiln-node05")
    assert len(rounds) == 2 and len(rounds[0]) == 4
    met = [p for r in rounds for p in r if "kiln-node05" in p]
    assert len(met) == 2 and len({n for p in met for n in p}) == 3  # two different partners
    (first,) = [n for n in met[0] if n != "kiln-node05"]
    assert any(first in p and "kiln-node05" not in p for p in rounds[1])  # cleared by another


def test_a_healthy_fleet_takes_one_round(tmp_path):
    cluster, nodes, floors = cluster_of(tmp_path, 8)
    assert len(run(PairwisePass(cluster, nodes, floors), "nobody")) == 1


def test_a_fleet_too_small_for_a_median_runs_the_fixed_schedule(tmp_path):
    """Four nodes without rails: round one's two pairs set no median (and no floor exists), so
    the pass falls back to pair_schedule's rounds, every pair judged together afterwards."""
    cluster, nodes, floors = cluster_of(tmp_path, 4)
    pass_ = PairwisePass(cluster, nodes, floors)
    assert run(pass_, "kiln-node04") == pair_schedule(sorted(nodes))
    assert pass_.rounds == 3 and pass_.locator is None


def test_a_pair_that_left_no_result_is_slow(tmp_path):
    """The campaign records 0 GB/s for a pair whose job left nothing: it is asked about again."""
    cluster, nodes, floors = cluster_of(tmp_path, 6)
    pass_ = PairwisePass(cluster, nodes, floors)
    first = pass_.first()
    pass_.record({p: 0.0 if p == first[0] else FAST for p in first})
    assert set(n for p in pass_.next() for n in p) >= set(first[0])
