"""Pair schedule and localisation on synthetic pair matrices."""

from __future__ import annotations

import math

import pytest

from kiln.judging.pairs import localise, pair_schedule

NODES = [f"n{i:02d}" for i in range(16)]


@pytest.mark.parametrize("count", [2, 3, 7, 8, 16, 100, 1000])
def test_schedule_rounds_are_matchings_with_new_partners(count):
    nodes = [f"n{i:04d}" for i in range(count)]
    schedule = pair_schedule(nodes)
    expected = min(count - 1 if count % 2 == 0 else count, max(3, math.ceil(math.log2(count))))
    assert len(schedule) == expected
    seen = set()
    for rnd in schedule:
        members = [n for pair in rnd for n in pair]
        assert len(members) == len(set(members))  # each node at most once per round
        assert len(rnd) == count // 2
        for pair in rnd:
            assert pair not in seen and pair[0] < pair[1]
            seen.add(pair)


def test_full_round_robin_meets_everyone():
    schedule = pair_schedule(NODES[:6], rounds=99)
    assert len({p for rnd in schedule for p in rnd}) == 15


def matrix(slow_nodes=(), slow_links=(), good=390.0, bad=90.0):
    values = {}
    for rnd in pair_schedule(NODES):
        for a, b in rnd:
            slow = a in slow_nodes or b in slow_nodes or {a, b} in [set(x) for x in slow_links]
            values[(a, b)] = bad if slow else good
    return values


def test_all_good():
    result = localise(matrix(), 300.0)
    assert result.clean and not result.culprit_nodes and not result.culprit_links


def test_one_bad_node():
    result = localise(matrix(slow_nodes=["n05"]), 300.0)
    assert set(result.culprit_nodes) == {"n05"}
    assert result.culprit_nodes["n05"].slow == result.culprit_nodes["n05"].total == 4
    assert result.culprit_links == []


def test_one_bad_link():
    link = pair_schedule(NODES)[1][2]
    result = localise(matrix(slow_links=[link]), 300.0)
    assert result.culprit_nodes == {}
    assert [(a, b) for a, b, _ in result.culprit_links] == [link]


def test_bad_node_and_bad_link_sharing_a_partner():
    schedule = pair_schedule(NODES)
    bad = "n03"
    partner = next(b if a == bad else a for a, b in schedule[0] if bad in (a, b))
    link = next(p for p in schedule[2] if partner in p and bad not in p)
    result = localise(matrix(slow_nodes=[bad], slow_links=[link]), 300.0)
    assert set(result.culprit_nodes) == {bad}  # the partner is not blamed: explained away
    assert [(a, b) for a, b, _ in result.culprit_links] == [link]


def test_fabric_wide_slowness_drains_nobody():
    result = localise(matrix(good=90.0), 300.0)
    assert result.fabric_wide and result.culprit_nodes == {}
