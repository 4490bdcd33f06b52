"""A Slurm upgrade in Slurm's order (#31): which steps a provision takes for the versions the
hosts run (kiln.profiles.slurm_upgrade), read from real `-V` outputs, and the slurm stage's plays
in that order before anything else of the stage."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kiln.app import main
from kiln.commands.validate import recorded_slurm
from kiln.inventory import RecordedSlurm, load_cluster
from kiln.profiles.slurm import installed_filter
from kiln.profiles.slurm_upgrade import backup_dir, upgrade_plan
from kiln.records.runs import RunRecord

ROOT = Path(__file__).parent.parent.parent
REAL = ROOT / "tests" / "fixtures" / "real" / "slurm-version"
SLURMD_24 = (REAL / "slurmd-V_debian13_24.11.5.txt").read_text()
CTLD_24 = (REAL / "slurmctld-V_debian13_24.11.5.txt").read_text()
SLURMD_22 = (REAL / "slurmd-V_debian12_22.05.8.txt").read_text()
NEW = "slurm-wlm 26.05.5\n"  # what forky's 26.05.5-1 slurmd -V prints (the sandbox's upgrade test)
TARGET = {"declared": "26.05.5", "source": "repository", "platforms": {}}


def plan(readings, *, accounting=True, batch_size=1, compute=("node01", "node02")):
    return upgrade_plan(readings, controller="ctl", compute=list(compute), accounting=accounting,
                        batch_size=batch_size, **TARGET)  # fmt: skip


def test_a_major_upgrade_goes_database_then_controller_then_nodes_in_batches():
    readings = {
        "ctl": {"slurmctld": CTLD_24, "slurmdbd": CTLD_24.replace("slurmctld", "slurmdbd")},
        "node01": {"slurmd": SLURMD_24},
        "node02": {"slurmd": SLURMD_24},
    }
    steps = plan(readings).steps
    assert [s.kind for s in steps] == [
        "database-backup", "slurmdbd", "slurmctld-state", "slurmctld", "slurmd",
    ]  # fmt: skip
    assert steps[0].hosts == ["ctl"] and backup_dir("24.11.5", "26.05.5") in steps[0].detail
    assert steps[-1].hosts == ["node01", "node02"]
    assert "2 node(s) in 2 rolling batch(es) of up to 1" in steps[-1].detail


def test_without_accounting_there_is_no_database_step():
    readings = {"ctl": {"slurmctld": CTLD_24}, "node01": {"slurmd": SLURMD_24}}
    kinds = [s.kind for s in plan(readings, accounting=False, compute=["node01"]).steps]
    assert kinds == ["slurmctld-state", "slurmctld", "slurmd"]


def test_a_cluster_at_the_declared_version_or_without_slurm_upgrades_nothing():
    done = {"ctl": {"slurmctld": NEW.replace("slurm-wlm", "slurm")}, "node01": {"slurmd": NEW}}
    fresh = {"ctl": {}, "node01": {"slurmd": None}}
    for readings in (done, fresh):
        result = plan(readings, compute=["node01"])
        assert not result.upgrading and result.problems == [] and result.to == "26.05.5"


def test_a_node_left_behind_by_a_cut_off_run_is_the_only_one_upgraded():
    readings = {
        "ctl": {"slurmctld": NEW},
        "node01": {"slurmd": NEW},
        "node02": {"slurmd": SLURMD_24},
    }
    steps = plan(readings).steps
    assert [(s.kind, s.hosts) for s in steps] == [("slurmd", ["node02"])]


def test_a_jump_beyond_the_window_refuses_everything_naming_the_versions_and_the_way():
    readings = {"ctl": {"slurmctld": CTLD_24}, "node01": {"slurmd": SLURMD_22}}
    result = plan(readings, compute=["node01"])
    assert result.steps == []
    assert len(result.problems) == 1
    problem = result.problems[0]
    assert problem.startswith("node01: slurmd -V says 22.05.8")
    assert "upgrades in place from 24.11, 25.05, 25.11 only" in problem
    assert "upgrade through" in problem


def test_a_downgrade_is_refused():
    result = upgrade_plan({"ctl": {"slurmctld": NEW}}, controller="ctl", compute=[],
                          declared="24.11.5", source="repository", platforms={},
                          accounting=False, batch_size=1)  # fmt: skip
    assert result.steps == [] and "downgrade" in result.problems[0]


def test_the_role_filter_lists_the_older_daemons_including_slurmdbd():
    lines = f"slurmctld\t{CTLD_24}slurmdbd\t{CTLD_24.replace('slurmctld', 'slurmdbd')}"
    judged = installed_filter(lines, "26.05.5", "repository", "debian-13")
    assert judged["older"] == {"slurmctld": "24.11.5", "slurmdbd": "24.11.5"}
    assert judged["problems"] == []


def test_the_stage_judges_every_host_then_upgrades_controller_then_nodes_before_the_rest():
    plays = yaml.safe_load((ROOT / "playbooks" / "slurm.yml").read_text())
    first = [task.get("ansible.builtin.include_role", {}) for p in plays[:3] for task in p["tasks"]]
    assert [(r["name"], r["tasks_from"]) for r in first] == [
        ("slurm_common", "upgrade_check"),
        ("slurm_controller", "upgrade"),
        ("slurm_node", "upgrade"),
    ]
    # every host judged; a refusal stops them all at upgrade_check's last task, not an
    # unreachable host (any_errors_fatal would: one hung node stopped its whole shard)
    assert plays[0]["hosts"] == "kiln_controllers:kiln_compute"
    assert "any_errors_fatal" not in plays[0]
    assert plays[2]["serial"] == "{{ kiln_batch_size | default('100%') }}"
    # the install of the configuration and the daemons comes after the upgrade
    assert [r["role"] for r in plays[3]["roles"]] == ["munge", "slurm_common"]


def test_the_controller_dumps_and_archives_before_the_packages_change_and_converts_after():
    tasks = yaml.safe_load(
        (ROOT / "playbooks" / "roles" / "slurm_controller" / "tasks" / "upgrade.yml").read_text()
    )
    names = [task["name"] for task in tasks]

    def at(prefix):
        return next(i for i, name in enumerate(names) if name.startswith(prefix))

    assert at("Mark the upgrade as under way") == 0
    assert at("Stop slurmctld") < at("Back up the accounting database")
    assert at("Stop slurmdbd") < at("Back up the accounting database")
    assert at("Archive slurmctld's saved state") < at("Keep systemd from starting")
    assert at("Keep systemd from starting") < at("Upgrade the controller's Slurm packages")
    assert at("Upgrade the controller's Slurm packages") < at("Convert the accounting database")
    assert at("Convert the accounting database") < at("Start slurmdbd") < at("Start slurmctld")
    assert names[-1] == "The controller's upgrade is done"
    # The database is dumped and converted only where slurmdbd runs (accounting on): a slurmdbd
    # left installed with accounting off would never answer, and the wait would run out.
    for prefix in ("Stop slurmdbd", "Back up the accounting", "Convert the accounting"):
        assert "slurm_controller_accounting | bool" in tasks[at(prefix)]["when"]


HOSTS = """\
all:
  children:
    kiln_controllers:
      hosts:
        ctl01: {ansible_host: 10.0.0.1, kiln_os: debian-13}
    kiln_compute:
      hosts:
        cpu01: {ansible_host: 10.0.1.1, kiln_gpu_model: none, kiln_os: debian-13}
"""
NEWER = (
    "kiln_versions:\n  slurm: 26.05.5\n"
    "kiln_slurm:\n  source: repository\n  repository:\n"
    "    url: https://repo.example.com/slurm\n    key_url: https://repo.example.com/key.asc\n"
    "    packages: debian\n"
)


def inventory_at(root: Path) -> Path:
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(HOSTS)
    (root / "group_vars" / "all.yml").write_text(NEWER)
    return root


def test_validate_refuses_a_jump_beyond_the_window_from_what_the_last_preflight_read(tmp_path):
    inventory = inventory_at(tmp_path / "inventory")
    far = RecordedSlurm(
        "run-1", {"ctl01": {"slurmctld": "24.11.5"}, "cpu01": {"slurmd": "22.05.8"}}
    )
    result = load_cluster(inventory, recorded=far)
    (finding,) = result.errors
    assert finding.origin.display(inventory) == "group_vars/all.yml:2"
    assert "slurmd -V says 22.05.8" in finding.message
    assert "upgrades in place from 24.11, 25.05, 25.11 only" in finding.message
    assert "as preflight run run-1 read it on cpu01" in finding.message
    near = RecordedSlurm("run-1", {"ctl01": {"slurmctld": "24.11.5"}, "cpu01": {"slurmd": None}})
    assert load_cluster(inventory, recorded=near).ok
    gone = RecordedSlurm("run-1", {"retired": {"slurmd": "22.05.8"}})  # not in the inventory
    assert load_cluster(inventory, recorded=gone).ok


def test_kiln_validate_reads_the_versions_the_last_preflight_recorded(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    inventory = inventory_at(tmp_path / "inventory")
    record = RunRecord.create(tmp_path / "home")
    record.write_summary({"inventory": str(inventory.resolve()), "stages": [{"name": "preflight"}]})
    facts = {"cpu01": {"slurm": installed_filter(f"slurmd\t{SLURMD_22}", "26.05.5",
                                                 "repository", "debian-13")}}  # fmt: skip
    record.write_facts(facts)
    assert recorded_slurm(inventory) == RecordedSlurm(
        record.run_id, {"cpu01": {"slurmd": "22.05.8"}}
    )
    with pytest.raises(SystemExit) as exited:
        main(["validate", str(inventory)])
    said = capsys.readouterr().err
    assert exited.value.code == 2
    assert "slurmd -V says 22.05.8" in said and "group_vars/all.yml:2" in said


def test_plan_live_reads_every_slurm_host_once_and_plans_from_what_they_said():
    from kiln.fleet import CommandOutcome, ExecResult, NodeResult
    from kiln.inventory import require_valid
    from kiln.slurmctl.versions import slurm_upgrade

    cluster = require_valid(ROOT / "inventories" / "sandbox")
    said = {node.name: f"slurmd\t{SLURMD_24}" for node in cluster.compute}
    said[cluster.controllers[0].name] = f"slurmctld\t{CTLD_24}"
    unreachable = cluster.compute[-1].name
    calls = []

    def runner(nodes, command, fanout, timeout):
        calls.append([node.name for node in nodes])
        results = [
            NodeResult(n.name, n.address, CommandOutcome.UNREACHABLE, error="no route")
            if n.name == unreachable
            else NodeResult(n.name, n.address, CommandOutcome.OK, 0, said[n.name])
            for n in nodes
        ]
        return ExecResult(command, results, 0.1, fanout, timeout)

    upgrade = slurm_upgrade(cluster, runner=runner)
    assert len(calls) == 1 and sorted(calls[0]) == sorted(n.name for n in cluster.nodes)
    assert upgrade.unread == {unreachable: "no route"}
    # the sandbox declares what Debian 13 ships: every host that answered runs it already
    assert upgrade.plan.problems == [] and not upgrade.plan.upgrading
