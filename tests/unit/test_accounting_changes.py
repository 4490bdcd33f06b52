"""Accounting as data (#31): kiln_slurm.accounting against what sacctmgr shows, as the sacctmgr
commands between them. The database side is what Slurm 24.11's sacctmgr printed on the sandbox
after `kiln provision` applied DECLARED (tests/fixtures/sacctmgr/README.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from kiln.accounting import FILTERS, changes
from kiln.inventory import load_cluster
from kiln.inventory.accounting_spec import AccountingSpec
from kiln.parsers import ParseError
from kiln.parsers.sacctmgr import Association, duration_minutes, parse_database, reads

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "tests" / "fixtures" / "sacctmgr" / "slurm-24.11"
SACCTMGR = ["sacctmgr", "--immediate"]

DECLARED = {
    "qos": {
        "high": {
            "priority": 10,
            "max_wall": "2:00:00",
            "grp_tres": {"cpu": 4, "mem": 2048},
            "max_jobs_per_user": 3,
        }
    },
    "accounts": {
        "research": {
            "fairshare": 10,
            "grp_tres": {"node": 1},
            "max_wall": "2-00:00:00",
            "description": "Research",
        },
        "vision": {"parent": "research", "qos": ["normal", "high"], "default_qos": "high"},
    },
    "users": {"alice": {"accounts": ["vision", "research"], "fairshare": 3, "admin": "operator"}},
}


def captured(associations: str = "associations.txt") -> dict[str, str]:
    names = {"qos": "qos.txt", "accounts": "accounts.txt", "users": "users.txt"}
    outputs = {kind: (CAPTURE / name).read_text() for kind, name in names.items()}
    outputs["associations"] = (CAPTURE / associations).read_text()
    return outputs


def spec(**changes_to: object) -> AccountingSpec:
    return AccountingSpec.model_validate({**DECLARED, **changes_to})


def argvs(spec_: AccountingSpec, outputs: dict[str, str]) -> list[list[str]]:
    return [list(c.argv) for c in changes(spec_, "sandbox", parse_database(outputs))]


def test_the_capture_reads_as_the_values_it_was_declared_with():
    database = parse_database(captured())
    high = database.qos["high"]
    assert (high.priority, high.max_wall, high.grp_tres, high.max_jobs_per_user) == (
        10, 120, {"cpu": 4, "mem": 2048}, 3,
    )  # fmt: skip
    assert database.associations[("research", "")] == Association(
        parent="root", fairshare="10", grp_tres={"node": 1}, max_wall=2880
    )
    vision = database.associations[("vision", "")]
    assert (vision.parent, vision.qos, vision.default_qos) == (
        "research", {"high", "normal"}, "high",
    )  # fmt: skip
    assert database.associations[("vision", "alice")].fairshare == "3"
    assert database.users["alice"].default_account == "vision"
    assert database.users["alice"].admin == "operator"
    assert database.accounts["research"].description == "research"


def test_the_database_kiln_made_is_converged():
    assert argvs(spec(), captured()) == []


def test_reading_without_wopl_would_never_converge():
    # Children print their parents' MaxWall and QoS without wopl: kiln would "clear" them on
    # every run. kiln's associations read asks for each association's own limits.
    assert "wopl" in reads("sandbox")["associations"]
    assert argvs(spec(), captured("associations-with-parent-limits.txt")) != []


def test_an_empty_database_gets_qos_then_parents_then_children_then_users():
    empty = {kind: "" for kind in ("qos", "accounts", "associations", "users")}
    assert argvs(spec(), empty) == [
        [*SACCTMGR, "add", "qos", "high", "Priority=10", "MaxWall=120",
         "GrpTRES=cpu=4,mem=2048", "MaxJobsPerUser=3"],
        [*SACCTMGR, "add", "account", "research", "Cluster=sandbox", "Parent=root",
         "Description=Research", "Fairshare=10", "GrpTRES=node=1", "MaxWall=2880"],
        [*SACCTMGR, "add", "account", "vision", "Cluster=sandbox", "Parent=research",
         "QOS=high,normal", "DefaultQOS=high"],
        [*SACCTMGR, "add", "user", "alice", "Account=vision", "Cluster=sandbox",
         "DefaultAccount=vision", "AdminLevel=operator", "Fairshare=3"],
        [*SACCTMGR, "add", "user", "alice", "Account=research", "Cluster=sandbox", "Fairshare=3"],
    ]  # fmt: skip


def test_a_limit_taken_out_is_cleared_and_a_changed_one_set():
    accounts = {
        "research": {"fairshare": 20, "grp_tres": {"cpu": 8}, "description": "Research"},
        "vision": DECLARED["accounts"]["vision"],
    }
    qos = {"high": {"priority": 10, "max_wall": "02:00:00", "grp_tres": {"cpu": 4}}}
    assert argvs(spec(accounts=accounts, qos=qos), captured()) == [
        [*SACCTMGR, "modify", "qos", "where", "name=high", "set", "GrpTRES=mem=-1",
         "MaxJobsPerUser=-1"],
        [*SACCTMGR, "modify", "account", "where", "name=research", "cluster=sandbox", "set",
         "Fairshare=20", "GrpTRES=cpu=8,node=-1", "MaxWall=-1"],
    ]  # fmt: skip


def test_a_moved_account_a_new_default_and_a_new_association():
    accounts = {**DECLARED["accounts"], "nlp": {"description": "Language"}}
    accounts["vision"] = {**accounts["vision"], "parent": "nlp"}
    users = {"alice": {"accounts": ["nlp", "vision"], "fairshare": 3, "admin": "none"}}
    assert argvs(spec(accounts=accounts, users=users), captured()) == [
        [*SACCTMGR, "add", "account", "nlp", "Cluster=sandbox", "Parent=root",
         "Description=Language"],
        [*SACCTMGR, "modify", "account", "where", "name=vision", "cluster=sandbox", "set",
         "Parent=nlp"],
        [*SACCTMGR, "add", "user", "alice", "Account=nlp", "Cluster=sandbox", "Fairshare=3"],
        [*SACCTMGR, "modify", "user", "where", "name=alice", "set", "DefaultAccount=nlp",
         "AdminLevel=none"],
    ]  # fmt: skip


def test_what_only_the_database_holds_stays_unless_prune():
    outputs = captured()
    outputs["qos"] += "scavenger|0||||\n"
    outputs["accounts"] += "old|old|old\nold-child|old-child|old\n"
    outputs["associations"] += (
        "old||root|1|||||\nold-child||old|1|||||\nold-child|bob||1|||||\nvision|bob||1|||||\n"
    )
    outputs["users"] += "bob|old-child|None\n"
    assert argvs(spec(), outputs) == []
    assert argvs(spec(prune=True), outputs) == [
        [*SACCTMGR, "remove", "user", "where", "name=bob", "account=old-child", "cluster=sandbox"],
        [*SACCTMGR, "remove", "user", "where", "name=bob", "account=vision", "cluster=sandbox"],
        # leaves first; root, user root and QoS normal are Slurm's own and never removed
        [*SACCTMGR, "remove", "account", "where", "name=old-child", "cluster=sandbox"],
        [*SACCTMGR, "remove", "account", "where", "name=old", "cluster=sandbox"],
        [*SACCTMGR, "remove", "qos", "where", "name=scavenger"],
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (
            {"accounts": {"a": {"parent": "b"}, "b": {"parent": "a"}}},
            "accounts a -> b -> a form a cycle",
        ),
        ({"accounts": {"a": {"parent": "nowhere"}}}, "account a: parent 'nowhere' is not declared"),
        ({"accounts": {"root": {}}}, "account root is Slurm's own"),
        ({"accounts": {"Vision": {}}}, "'Vision' is not a Slurm name"),
        ({"accounts": {"a": {"qos": ["gold"]}}}, "account a: QoS 'gold' is not declared"),
        ({"users": {"bob": {"accounts": ["ghost"]}}}, "user bob: account 'ghost' is not declared"),
        (
            {"users": {"bob": {"accounts": ["root"], "default_account": "x"}}},
            "default_account 'x' is not in its accounts",
        ),
        ({"accounts": {"a": {"grp_tres": {"gpu": 8}}}}, "TRES 'gpu' is not one of"),
        ({"accounts": {"a": {"max_wall": "two days"}}}, "'two days' is not a Slurm duration"),
        ({"accounts": {"a": {"fairshare": "10"}}}, "Input should be a valid integer"),
        ({"accounts": {"a": {"description": "R|D"}}}, "must not contain |"),
    ],
)  # fmt: skip
def test_a_declaration_sacctmgr_would_refuse_is_refused_here(declared, message):
    with pytest.raises(ValidationError, match=message.replace("|", r"\|")):
        AccountingSpec.model_validate(declared)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("90", 90), ("30:30", 31), ("02:00:00", 120), ("2-00:00:00", 2880), ("1-12", 2160),
     ("1-00:30", 1470), ("0-00:00:30", 1)],
)  # fmt: skip
def test_slurm_durations_in_minutes(text, minutes):
    assert duration_minutes(text) == minutes


def test_a_line_with_the_wrong_number_of_fields_is_named():
    outputs = captured()
    outputs["users"] = "alice|vision\n"
    with pytest.raises(ParseError, match="show user: 2 fields, not 3.*'alice\\|vision'"):
        parse_database(outputs)


def test_the_roles_filters_take_ansibles_registered_loop():
    read = FILTERS["kiln_sacctmgr_reads"]("sandbox")
    results = [{"item": item, "stdout": captured()[item["kind"]]} for item in read]
    declared = {**DECLARED, "accounts": {**DECLARED["accounts"], "nlp": {}}}
    todo = FILTERS["kiln_sacctmgr_changes"](declared, "sandbox", tuple(results))
    assert todo == [
        {"action": "add", "kind": "account", "name": "nlp",
         "argv": [*SACCTMGR, "add", "account", "nlp", "Cluster=sandbox", "Parent=root"]},
    ]  # fmt: skip


def declared_example(tmp_path: Path, accounting: object) -> Path:
    root = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "example-h100", root)
    path = root / "group_vars" / "all.yml"
    settings = yaml.safe_load(path.read_text())
    settings["kiln_slurm"] = {**settings.get("kiln_slurm", {}), "accounting": accounting}
    path.write_text(yaml.safe_dump(settings, sort_keys=False))
    return root


def test_validate_names_a_bad_declaration_at_its_file(tmp_path):
    root = declared_example(tmp_path, {"accounts": {"vision": {"parent": "research"}}})
    found = [(f.origin.display(root), f.message) for f in load_cluster(root).errors if f.origin]
    assert len(found) == 1
    where, message = found[0]
    assert where.startswith("group_vars/all.yml:")
    assert "account vision: parent 'research' is not declared" in message


def test_accounting_true_still_means_slurmdbd_without_declarations(tmp_path):
    cluster = load_cluster(declared_example(tmp_path, True)).cluster
    assert cluster.slurm.accounting_on and cluster.slurm.declared_accounting is None


def test_plan_counts_the_declaration_and_live_lists_the_changes(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import kiln.slurmctl
    from kiln.app import app
    from kiln.commands.plan import accounting_changes

    root = declared_example(tmp_path, DECLARED)
    shown = CliRunner().invoke(app, ["plan", str(root)], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "Accounting: 1 QoS, 2 account(s), 1 user(s) declared; `kiln plan --live`" in (
        shown.output
    )
    # --live reads the database on the controller (here: the sandbox's capture, one account
    # short of the declaration) and lists what provision would run.
    cluster = load_cluster(root).cluster
    held = parse_database(captured())
    monkeypatch.setattr(kiln.slurmctl, "held_accounting", lambda _cluster: held)
    assert accounting_changes(cluster) == []
    more = declared_example(tmp_path / "more", {**DECLARED, "accounts": {
        **DECLARED["accounts"], "nlp": {"description": "Language"}}})  # fmt: skip
    (change,) = accounting_changes(load_cluster(more).cluster)
    assert change.describe() == (
        "+ account nlp: sacctmgr --immediate add account nlp Cluster=example Parent=root "
        "Description=Language"
    )
