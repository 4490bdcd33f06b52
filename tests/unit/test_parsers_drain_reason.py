"""kiln's drain-reason grammar: one predicate and one builder, the same on the Ansible side.

The roles' reason lines and their "is this kiln's drain?" condition are rendered here with the
very filters Ansible loads (playbooks/filter_plugins/kiln_filters.py), so a role that drifts
from the Python grammar fails in the unit tier, not on a cluster.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import jinja2
import pytest
import yaml

from kiln.gpu.filters import FILTERS as GPU_FILTERS
from kiln.parsers.drain_reason import (
    FIXED,
    PREFIX,
    drain_reason,
    fixed_reason,
    is_kiln_reason,
    operator_reason,
    reason_operator,
)

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "playbooks" / "roles"

REASONS = [
    "kiln: gemm gpu3 612 TFLOPS < floor 700",
    "kiln: maintenance",
    "kiln: new node, quarantined until burn-in passes",
    "kiln: disk swap (by alice)",
    "kiln:",
    "bad DIMM, ticket 4711",
    "bad DIMM; see kiln: gemm run of last week",  # mentions kiln: later: the operator's
    "swapped by kiln: no",
    " kiln: leading space",  # Slurm keeps what it was given: not a kiln reason
    "Kiln: capitalised",
    "kiln gemm (no colon)",
    "",
    None,
]


@pytest.mark.parametrize("reason", REASONS)
def test_only_a_reason_that_starts_with_the_prefix_is_kiln_s(reason):
    expected = reason is not None and reason[:5] == "kiln:"
    assert is_kiln_reason(reason) is expected


def test_the_builders_write_reasons_the_predicate_knows():
    assert PREFIX == "kiln:"
    assert drain_reason("gemm gpu3 low") == "kiln: gemm gpu3 low"
    assert fixed_reason("maintenance") == "kiln: maintenance"
    assert fixed_reason("quarantine", why="new node") == (
        "kiln: new node, quarantined until burn-in passes"
    )
    assert fixed_reason("driver_upgrade", installed="550.90.07", target="570.124.06") == (
        "kiln: driver upgrade 550.90.07 -> 570.124.06"
    )
    fields = {"why": "x", "installed": "1", "target": "2"}
    assert all(is_kiln_reason(fixed_reason(kind, **fields)) for kind in FIXED)
    with pytest.raises(ValueError, match="unknown kiln drain reason 'reboot'"):
        fixed_reason("reboot")


def test_the_operator_is_read_back_only_from_kiln_s_own_reasons():
    reason = operator_reason("disk swap", "a b;c[d]")
    assert reason == "kiln: disk swap (by a_b_c_d_)"
    assert reason_operator(reason) == "a_b_c_d_"
    assert reason_operator("kiln: gemm gpu3 low") is None
    assert reason_operator("swapped disk (by bob)") is None  # not kiln's: Slurm's user counts
    assert reason_operator(None) is None


def ansible_filters() -> dict:
    """The filters Ansible loads from playbooks/filter_plugins/kiln_filters.py."""
    path = ROOT / "playbooks" / "filter_plugins" / "kiln_filters.py"
    spec = importlib.util.spec_from_file_location("kiln_filters_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


@pytest.mark.parametrize("reason", REASONS)
def test_the_ansible_filter_answers_as_the_python_function(reason):
    assert ansible_filters()["is_kiln_reason"](reason) is is_kiln_reason(reason)


def test_the_ansible_builder_is_the_python_builder():
    build = ansible_filters()["kiln_drain_reason"]
    assert build("maintenance") == fixed_reason("maintenance")
    assert build("quarantine", why="hardware changed") == fixed_reason(
        "quarantine", why="hardware changed"
    )


def render(expression: str, **variables) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update({**ansible_filters(), **GPU_FILTERS})
    env.tests["search"] = lambda value, pattern: re.search(pattern, value) is not None
    return env.from_string(expression).render(**variables)


def load(path: Path):
    return yaml.safe_load(path.read_text())


def task(path: Path, name: str) -> dict:
    return next(t for t in load(path) if t["name"] == name)


def test_the_roles_drain_with_the_grammar_s_texts_unchanged():
    defaults = load(ROLES / "slurm_maintenance" / "defaults" / "main.yml")
    assert render(defaults["slurm_maintenance_reason"]) == "kiln: maintenance"
    quarantine = task(ROLES / "slurm_node" / "tasks" / "quarantine.yml", "Drain the node until "
                      "burn-in passes")["ansible.builtin.command"]["argv"][-1]  # fmt: skip
    for why in ("new node", "hardware changed"):
        assert render(quarantine, __slurm_node_why=why) == (
            f"reason=kiln: {why}, quarantined until burn-in passes"
        )
    upgrade = load(ROLES / "nvidia_driver" / "vars" / "main.yml")["__nvidia_driver_upgrade_reason"]
    text = render(
        upgrade, __nvidia_driver_plan={"installed": "550.90.07-1"}, __nvidia_driver_target="570"
    )
    assert text == "kiln: driver upgrade 550.90.07 -> 570"


@pytest.mark.parametrize(
    ("state", "reason", "owned"),
    [
        ("IDLE", "", True),
        ("IDLE+DRAIN", "kiln: new node, quarantined until burn-in passes", True),
        ("IDLE+DRAIN", "bad DIMM; see kiln: gemm run of last week", False),
        ("DOWN*", "Not responding", False),
    ],
)
def test_maintenance_drains_only_nodes_kiln_may_take(state, reason, owned):
    decide = task(ROLES / "slurm_maintenance" / "tasks" / "drain_in_slurm.yml",
                  "Decide whether kiln drains the node")  # fmt: skip
    expression = decide["ansible.builtin.set_fact"]["__slurm_maintenance_owned"]
    rendered = render(
        expression,
        __slurm_maintenance_listing=f"NodeName=n01 State={state} Reason={reason}",
        __slurm_maintenance_state=state,
        __slurm_maintenance_prior_reason=reason,
    )
    assert rendered.strip() == str(owned)
