"""kiln's drain-reason grammar: `kiln:<kind>:<operation>: <why>`, the same on the Ansible side.

The roles' reason lines are rendered here with the very filters Ansible loads
(playbooks/filter_plugins/kiln_filters.py), so a role that drifts from the Python grammar fails
in the unit tier, not on a cluster. The role's decisions themselves run through real
ansible-playbook in test_slurmctl_role_maintenance.py.
"""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

import jinja2
import pytest
import yaml

from captures import shared_capture
from kiln.gpu.filters import FILTERS as GPU_FILTERS
from kiln.parsers.drain_reason import (
    KINDS,
    REASON_MAX,
    DrainReason,
    drain_reason,
    fixed_reason,
    format_reason,
    is_kiln_reason,
    node_drain,
    operator_reason,
    parse_reason,
    reason_kind,
    reason_operator,
)

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "playbooks" / "roles"
RECORDED = ROOT / "tests/fixtures/real/slurm-sinfo-scontrol"
RUN = "20261130T101500Z-3f9a1c"

# reason -> what parse_reason answers: (kind, operation, why), or None (not kiln's)
PARSED = {
    f"kiln:quarantine:{RUN}: new node, quarantined until burn-in passes": (
        "quarantine", RUN, "new node, quarantined until burn-in passes",
    ),
    f"kiln:burnin:{RUN}: gemm gpu3 612 TFLOPS < floor 700": (
        "burnin", RUN, "gemm gpu3 612 TFLOPS < floor 700",
    ),
    f"kiln:health:{RUN}: xid 79 on gpu2": ("health", RUN, "xid 79 on gpu2"),
    f"kiln:maintenance:{RUN}: driver upgrade 550.90.07 -> 570.124.06": (
        "maintenance", RUN, "driver upgrade 550.90.07 -> 570.124.06",
    ),
    "kiln:operator:alice: disk swap": ("operator", "alice", "disk swap"),
    "kiln:quarantine:: new node": ("quarantine", None, "new node"),  # no operation recorded
    # an operator's text that holds "kiln:" later stays the operator's
    "kiln:operator:bob: see kiln:burnin:x: gemm": ("operator", "bob", "see kiln:burnin:x: gemm"),
    # written by older kiln: the kind they meant, no operation id
    "kiln: new node, quarantined until burn-in passes": (
        "quarantine", None, "new node, quarantined until burn-in passes",
    ),
    "kiln: hardware changed, quarantined until burn-in passes": (
        "quarantine", None, "hardware changed, quarantined until burn-in passes",
    ),
    "kiln: gemm gpu3 612 TFLOPS < floor 700": ("burnin", None, "gemm gpu3 612 TFLOPS < floor 700"),
    "kiln: no result: job timed out or crashed": (
        "burnin", None, "no result: job timed out or crashed",
    ),
    "kiln: maintenance": ("maintenance", None, "maintenance"),
    "kiln: driver upgrade 550.90.07 -> 570.124.06": (
        "maintenance", None, "driver upgrade 550.90.07 -> 570.124.06",
    ),
    "kiln: disk swap (by alice)": ("operator", None, "disk swap (by alice)"),
    # anyone else's
    "bad DIMM, ticket 4711": None,
    "bad DIMM; see kiln: gemm run of last week": None,
    "swapped by kiln: no": None,
    " kiln: leading space": None,  # Slurm keeps what it was given: not a kiln reason
    "Kiln: capitalised": None,
    "kiln gemm (no colon)": None,
    "kiln:": None,
    "kiln: ": None,
    "kiln:reboot:r1: unknown kind": None,
    "kiln:burnin:r;1: not a plain operation id": None,
    "kiln:burnin:r1:no space": None,
    "memory issues?": None,  # the recorded real drain
    "Not responding": None,
    "": None,
    None: None,
}  # fmt: skip


@pytest.mark.parametrize("reason", list(PARSED))
def test_parse_answers_kind_operation_and_why(reason):
    parsed = parse_reason(reason)
    expected = PARSED[reason]
    assert (parsed and (parsed.kind, parsed.operation, parsed.why)) == expected
    assert is_kiln_reason(reason) is (expected is not None)
    assert reason_kind(reason) == (expected[0] if expected else None)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_round_trips(kind):
    text = format_reason(kind, RUN, "why  it\nwas drained")
    assert text == f"kiln:{kind}:{RUN}: why it was drained"
    assert parse_reason(text) == DrainReason(kind, RUN, "why it was drained")
    assert parse_reason(text).text == text


@pytest.mark.parametrize("reason", [r for r, p in PARSED.items() if p and p[1]])
def test_new_reasons_round_trip_through_the_parsed_form(reason):
    assert parse_reason(reason).text == reason


def test_reasons_are_one_line_safe_to_pass_as_one_argv_element():
    why = 'it\'s "bad"; rm -rf / $(id) `uname`\n\tsecond line\x07 ' + "x" * 300
    text = format_reason("operator", "alice", why)
    assert "\n" not in text and "\t" not in text and "\x07" not in text
    assert len(text) == REASON_MAX and text.endswith("...")
    assert text.startswith('kiln:operator:alice: it\'s "bad"; rm -rf / $(id) `uname` second')
    argv = ["scontrol", "update", "nodename=n1", "state=drain", f"reason={text}"]
    assert shlex.split(shlex.join(argv)) == argv
    assert parse_reason(text).kind == "operator"


def test_the_builders_refuse_what_the_grammar_cannot_hold():
    with pytest.raises(ValueError, match="unknown kiln drain kind 'reboot'"):
        format_reason("reboot", RUN, "x")
    with pytest.raises(ValueError, match="not a plain token"):
        format_reason("burnin", "run 1; id", "x")
    with pytest.raises(ValueError, match="needs a why"):
        format_reason("burnin", RUN, " \n ")
    with pytest.raises(ValueError, match="unknown kiln drain reason 'reboot'"):
        fixed_reason("reboot")


def test_the_roles_reasons_by_name():
    assert fixed_reason("maintenance", RUN, why="maintenance") == (
        f"kiln:maintenance:{RUN}: maintenance"
    )
    assert fixed_reason("quarantine", RUN, why="new node") == (
        f"kiln:quarantine:{RUN}: new node, quarantined until burn-in passes"
    )
    assert fixed_reason("quarantine", why="new node") == (  # no run id given: none recorded
        "kiln:quarantine:: new node, quarantined until burn-in passes"
    )
    assert fixed_reason("driver_upgrade", RUN, installed="550.90.07", target="570.124.06") == (
        f"kiln:maintenance:{RUN}: driver upgrade 550.90.07 -> 570.124.06"
    )
    assert fixed_reason("health", RUN, why="xid 79") == f"kiln:health:{RUN}: xid 79"


def test_the_operator_is_read_back_only_from_kiln_s_own_operator_drains():
    reason = operator_reason("disk swap", "a b;c[d]")
    assert reason == "kiln:operator:a_b_c_d_: disk swap"
    assert reason_operator(reason) == "a_b_c_d_"
    assert reason_operator("kiln: disk swap (by alice)") == "alice"  # older kiln
    assert reason_operator("kiln: gemm gpu3 low") is None
    assert reason_operator(f"kiln:maintenance:{RUN}: maintenance") is None
    assert reason_operator("swapped disk (by bob)") is None  # not kiln's: Slurm's user counts
    assert reason_operator(None) is None


def test_a_burnin_report_reason_is_the_older_form_the_campaign_stamps():
    assert drain_reason("gemm gpu3 low") == "kiln: gemm gpu3 low"
    assert parse_reason(drain_reason("gemm gpu3 low")) == DrainReason(
        "burnin", None, "gemm gpu3 low"
    )


def test_node_drain_reads_the_recorded_scontrol_output():
    text = shared_capture(
        "slurm-sinfo-scontrol/scontrol_show_node_gpu_gres_drain_huji_slurm1711.txt"
    ).read_text()
    assert node_drain(text, "oxygen-04") == {
        "name": "oxygen-04", "state": "IDLE+DRAIN", "unavailable": True,
        "reason": "memory issues?", "kind": "", "operation": "",
    }  # fmt: skip
    cricket = node_drain(text, "cricket")
    assert cricket["state"] == "IDLE" and not cricket["unavailable"] and cricket["reason"] == ""
    assert node_drain(text, "kiln-node09") == {} and node_drain("", "cricket") == {}
    ours = text.split("\n\n")[-1].rstrip() + f"\n   Reason=kiln:burnin:{RUN}: gemm low [root@x]\n"
    assert node_drain(ours, "cricket")["kind"] == "burnin"
    assert node_drain(ours, "cricket")["operation"] == RUN


def ansible_filters() -> dict:
    """The filters Ansible loads from playbooks/filter_plugins/kiln_filters.py."""
    path = ROOT / "playbooks" / "filter_plugins" / "kiln_filters.py"
    spec = importlib.util.spec_from_file_location("kiln_filters_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


@pytest.mark.parametrize("reason", list(PARSED))
def test_the_ansible_filters_answer_as_the_python_functions(reason):
    filters = ansible_filters()
    assert filters["is_kiln_reason"](reason) is is_kiln_reason(reason)
    assert filters["kiln_drain_kind"](reason) == (reason_kind(reason) or "")
    parsed = parse_reason(reason)
    assert filters["kiln_drain_parts"](reason) == (parsed.to_dict() if parsed else {})


def test_the_ansible_builder_is_the_python_builder():
    build = ansible_filters()["kiln_drain_reason"]
    assert build("maintenance", RUN, why="x") == fixed_reason("maintenance", RUN, why="x")
    assert build("quarantine", why="hardware changed") == fixed_reason(
        "quarantine", why="hardware changed"
    )


def render(expression: str, **variables) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update({**ansible_filters(), **GPU_FILTERS})
    return env.from_string(expression).render(**variables)


def load(path: Path):
    return yaml.safe_load(path.read_text())


def test_the_roles_drain_with_the_grammar():
    defaults = load(ROLES / "slurm_maintenance" / "defaults" / "main.yml")
    change = defaults["slurm_maintenance_change"]
    assert render(
        defaults["slurm_maintenance_reason"], kiln_run_id=RUN, slurm_maintenance_change=change
    ) == (f"kiln:maintenance:{RUN}: maintenance")
    assert render(
        defaults["slurm_maintenance_reason"],
        kiln_run_id=RUN,
        slurm_maintenance_change="nccl 2.21.5 -> 2.23.4",
    ) == (f"kiln:maintenance:{RUN}: nccl 2.21.5 -> 2.23.4")
    upgrade = load(ROLES / "nvidia_driver" / "vars" / "main.yml")["__nvidia_driver_upgrade_reason"]
    text = render(
        upgrade,
        kiln_run_id=RUN,
        __nvidia_driver_plan={"installed": "550.90.07-1"},
        __nvidia_driver_target="570",
    )
    assert text == f"kiln:maintenance:{RUN}: driver upgrade 550.90.07 -> 570"


def strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def test_the_quarantine_drain_is_of_kind_quarantine():
    """slurm_node's quarantine drain, wherever that role builds it, through the grammar."""
    lines = [
        text
        for path in sorted((ROLES / "slurm_node").rglob("*.yml"))
        for text in strings(load(path))
        if "kiln_drain_reason" in text
    ]
    assert lines, "slurm_node builds its quarantine reason with the kiln_drain_reason filter"
    for line in lines:
        for why in ("new node", "hardware changed"):
            rendered = render(line, __slurm_node_why=why, kiln_run_id=RUN)
            assert parse_reason(rendered.removeprefix("reason=")).kind == "quarantine", rendered


@pytest.mark.parametrize(
    ("reason", "lifters"),
    [
        ("kiln:quarantine:P1: new node, quarantined until burn-in passes", {"burnin"}),
        ("kiln:burnin:B1: gemm gpu3 612 TFLOPS < floor 700", {"burnin"}),
        ("kiln:health:H1: xid 79", {"burnin", "health"}),
        ("kiln:maintenance:M1: driver upgrade 550 -> 570", {"maintenance"}),
        ("kiln:operator:alice: disk swap", {"operator"}),
        ("kiln: disk swap (by alice)", {"operator"}),  # older kiln
        ("bad DIMM", set()),  # anyone else's: theirs to lift
        (None, set()),
    ],
)
def test_the_one_drain_policy_says_who_may_lift_each_drain(reason, lifters):
    from kiln.parsers.drain_reason import FILTERS, LIFTERS, may_lift

    assert {by for by in LIFTERS if may_lift(reason, by)} == lifters
    assert {by for by in LIFTERS if FILTERS["kiln_drain_may_lift"](reason, by)} == lifters


def test_the_drain_policy_covers_every_kind_and_refuses_an_unknown_lifter():
    from kiln.parsers.drain_reason import KINDS, POLICY, kinds_lifted_by, may_lift

    assert set(POLICY) == set(KINDS)
    assert kinds_lifted_by("burnin") == ("quarantine", "burnin", "health")
    with pytest.raises(ValueError, match="unknown lifter"):
        may_lift("kiln:operator:a: b", "anyone")
