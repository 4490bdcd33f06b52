"""`--nodes` selectors against the committed example inventory (slurm-ctl01, gpu[001-128] in
racks rack_r01..rack_r04 of 32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.errors import ExitCode, InvalidInputError
from kiln.fleet.selectors import select_nodes, split_terms
from kiln.inventory import require_valid
from kiln.render.hostlist import compress

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example-h100"


@pytest.fixture(scope="module")
def cluster():
    return require_valid(EXAMPLE)


def selected(cluster, selector: str | None) -> str:
    return compress(node.name for node in select_nodes(cluster, selector))


def test_no_selector_means_every_node_in_inventory_order(cluster):
    assert selected(cluster, None) == "slurm-ctl01,gpu[001-128]"
    assert selected(cluster, "  ") == "slurm-ctl01,gpu[001-128]"
    assert selected(cluster, "all") == "slurm-ctl01,gpu[001-128]"


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("gpu007", "gpu007"),
        ("gpu[001-003,010]", "gpu[001-003,010]"),
        ("rack_r02", "gpu[033-064]"),
        ("kiln_controllers", "slurm-ctl01"),
        ("gpu00*", "gpu[001-009]"),
        ("rack_r0[1-2]", "gpu[001-064]"),  # a hostlist of group names
        ("rack_r0[34]", "gpu[065-128]"),  # not a numeric range: a glob character class
        ("gpu003,gpu001", "gpu[001,003]"),  # inventory order, not selector order
        ("rack_r01,gpu[030-035]", "gpu[001-035]"),  # overlapping terms: each node once
        ("kiln_compute,!rack_r01,!gpu128", "gpu[033-127]"),
        ("!kiln_compute", "slurm-ctl01"),  # only exclusions: everything else
        ("rack_r01,rack_r02,&gpu0[2-4]*", "gpu[020-049]"),
        ("slurm-*, gpu128 ", "slurm-ctl01,gpu128"),
    ],
)
def test_selectors(cluster, selector, expected):
    assert selected(cluster, selector) == expected


def test_split_terms_keeps_hostlist_commas():
    assert split_terms("gpu[001-003,005],rack_r01,,!gpu002") == [
        "gpu[001-003,005]",
        "rack_r01",
        "!gpu002",
    ]


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("gpu0001", "'gpu0001' matches no node or group in the inventory; did you mean gpu001"),
        ("kiln_comput", "did you mean kiln_compute?"),
        ("gpu[120-130]", "gpu[129-130] (from 'gpu[120-130]') not in the inventory"),
        ("!gpu999", "'gpu999' matches no node or group"),  # a typo'd exclusion is no no-op
        ("cpu*", "'cpu*' matches no node or group"),
        ("gpu001,!gpu001", "selects no node"),
        ("gpu[3-1]", "runs backwards"),
        ("gpu001,!", "empty term '!'"),
    ],
)
def test_a_selector_that_matches_nothing_is_invalid_input(cluster, selector, message):
    with pytest.raises(InvalidInputError) as caught:
        select_nodes(cluster, selector)
    assert message in caught.value.message
    assert caught.value.exit_code == ExitCode.INVALID_INPUT
    assert "hostlists (gpu[001-040])" in caught.value.hint
