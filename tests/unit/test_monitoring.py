"""The monitoring stage (docs/monitoring.md): the Prometheus file_sd targets file rendered from
the inventory, the stage in the plan only when kiln_monitoring turns it on, and kiln_monitoring's
errors with file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kiln.errors import InvalidInputError
from kiln.inventory import load_cluster, require_valid
from kiln.inventory.monitoring_spec import MonitoringSpec
from kiln.plan import PlanOptions, make_plan
from kiln.plan.stages import STAGES, select_stages
from kiln.render.file_sd import TARGETS_FILE, file_sd_targets

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "playbooks" / "roles" / "monitoring"

HOSTS = """\
all:
  children:
    kiln_controllers:
      hosts:
        ctl01: {ansible_host: 10.0.0.10, kiln_rack: r00, kiln_gpu_model: none}
    kiln_compute:
      children:
        rack_r01:
          vars: {kiln_rack: r01, kiln_gpu_model: h100-sxm, kiln_gpu_count: 8}
          hosts:
            gpu001: {ansible_host: 10.1.0.1}
            gpu002: {ansible_host: 10.1.0.2}
        rack_r02:
          vars: {kiln_rack: r02, kiln_gpu_model: none, kiln_gpu_count: 0}
          hosts:
            cpu001: {ansible_host: 10.1.1.1}
"""
SETTINGS = """\
kiln_cluster_name: demo
kiln_versions: {driver_branch: 570, cuda: "12.8", nccl: "2.25.1", slurm: "24.05.8"}
kiln_slurm:
  source: repository
  repository:
    url: https://packages.example.com/slurm/debian12
    key_url: https://packages.example.com/slurm/key.asc
ansible_user: root
"""


def inventory(tmp_path: Path, monitoring: str | None) -> Path:
    (tmp_path / "group_vars").mkdir(parents=True, exist_ok=True)
    (tmp_path / "hosts.yml").write_text(HOSTS)
    (tmp_path / "group_vars" / "all.yml").write_text(SETTINGS + (monitoring or ""))
    return tmp_path


ON = "kiln_monitoring:\n  enabled: true\n  labels: {site: ams1}\n"


def test_the_targets_file_lists_every_node_once_and_gpu_nodes_for_dcgm(tmp_path):
    cluster = require_valid(inventory(tmp_path, ON))
    groups = file_sd_targets(cluster)
    node = [g for g in groups if g["labels"]["exporter"] == "node"]
    dcgm = [g for g in groups if g["labels"]["exporter"] == "dcgm"]
    assert [g["targets"] for g in node] == [
        ["10.0.0.10:9100"],
        ["10.1.0.1:9100"],
        ["10.1.0.2:9100"],
        ["10.1.1.1:9100"],
    ]
    assert [g["targets"] for g in dcgm] == [["10.1.0.1:9400"], ["10.1.0.2:9400"]]
    assert node[0]["labels"] == {
        "site": "ams1",
        "cluster": "demo",
        "node": "ctl01",
        "rack": "r00",
        "role": "controller",
        "exporter": "node",
    }
    assert dcgm[1]["labels"] == {
        "site": "ams1",
        "cluster": "demo",
        "node": "gpu002",
        "rack": "r01",
        "role": "compute",
        "exporter": "dcgm",
        "gpu_model": "h100-sxm",
    }
    assert len({g["labels"]["node"] for g in node}) == len(cluster.nodes)


def test_the_file_is_in_the_plan_as_json_prometheus_reads_and_only_when_on(tmp_path):
    on = make_plan(require_valid(inventory(tmp_path / "on", ON)), home=tmp_path / "state")
    off = make_plan(require_valid(inventory(tmp_path / "off", None)), home=tmp_path / "state")
    assert TARGETS_FILE not in [f.name for f in off.files]
    rendered = next(f for f in on.files if f.name == TARGETS_FILE).content
    groups = json.loads(rendered)
    assert all(set(g) == {"targets", "labels"} for g in groups)  # file_sd_config's format
    assert all(isinstance(v, str) for g in groups for v in g["labels"].values())


def test_names_instead_of_addresses_other_ports_and_no_dcgm(tmp_path):
    settings = (
        "kiln_monitoring:\n  enabled: true\n  target_address: name\n"
        "  node_exporter_port: 9200\n  dcgm_exporter: false\n"
    )
    groups = file_sd_targets(require_valid(inventory(tmp_path, settings)))
    assert [g["targets"] for g in groups] == [
        ["ctl01:9200"],
        ["gpu001:9200"],
        ["gpu002:9200"],
        ["cpu001:9200"],
    ]


def test_the_plan_shows_the_stage_only_when_the_inventory_turns_it_on(tmp_path):
    state = tmp_path / "state"
    off = make_plan(require_valid(inventory(tmp_path / "off", None)), home=state)
    on = make_plan(require_valid(inventory(tmp_path / "on", ON)), home=state)
    assert "monitoring" not in [s.name for s in off.stages]
    assert [s.name for s in on.stages][-1] == "monitoring"
    monitoring = next(s for s in on.stages if s.name == "monitoring")
    assert list(monitoring.hosts) == ["ctl01", "gpu001", "gpu002", "cpu001"]


def test_naming_the_stage_while_it_is_off_is_an_error_not_a_silent_skip(tmp_path):
    cluster = require_valid(inventory(tmp_path, None))
    chosen = tuple(select_stages("monitoring"))
    with pytest.raises(InvalidInputError, match="off in this inventory: monitoring") as error:
        make_plan(cluster, PlanOptions(stages=chosen), home=tmp_path / "state")
    assert "kiln_monitoring: {enabled: true}" in error.value.hint
    on = require_valid(inventory(tmp_path / "on", ON))
    plan = make_plan(on, PlanOptions(stages=chosen), home=tmp_path / "state")
    assert [s.name for s in plan.stages] == ["monitoring"]


def test_kiln_plan_lists_the_stage_and_the_targets_file(tmp_path, capsys):
    from kiln.app import main

    with pytest.raises(SystemExit) as exit_:
        main(["plan", str(inventory(tmp_path / "inv", ON)), "--json"])
    assert exit_.value.code == 0
    document = json.loads(capsys.readouterr().out)
    assert "monitoring" in [s["name"] for s in document["stages"]]
    assert TARGETS_FILE in [f["name"] for f in document["files"]]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{enabled: yes please}", "enabled"),
        ("{enabled: true, node_exporter_port: 70000}", "node_exporter_port"),
        ("{enabled: true, targets_path: relative/kiln.json}", "targets_path"),
        ("{enabled: true, targets_path: /etc/p/../x.json}", "targets_path"),
        ("{enabled: true, labels: {__meta: x}}", "labels"),
        ("{enabled: true, labels: {rack: x}}", "labels"),
        ("{enabled: true, dcgm_exporter_version: 'latest; rm'}", "dcgm_exporter_version"),
        ("{enabled: true, target_address: ip}", "target_address"),
        ("{enabled: true, prometheus: true}", "prometheus"),
    ],
)
def test_bad_values_are_errors_with_file_and_line(tmp_path, value, message):
    path = inventory(tmp_path, f"kiln_monitoring: {value}\n")
    result = load_cluster(path)
    errors = [f for f in result.errors if f.key and f.key.startswith("kiln_monitoring")]
    assert errors, [f.message for f in result.findings]
    finding = errors[0]
    assert message in f"{finding.key} {finding.message}"
    assert finding.origin.file == path / "group_vars" / "all.yml"
    assert finding.origin.line == SETTINGS.count("\n") + 1


def test_the_roles_defaults_agree_with_the_schema():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    spec = MonitoringSpec()
    assert f"default({spec.node_exporter_port})" in defaults["monitoring_node_exporter_port"]
    assert f"default({spec.dcgm_exporter_port})" in defaults["monitoring_dcgm_exporter_port"]
    assert f"default('{spec.targets_path}')" in defaults["monitoring_targets_path"]
    documented = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = documented["argument_specs"]["main"]["options"]
    assert set(options) == set(defaults)


def test_site_yml_runs_the_stage_and_the_stage_list_has_it():
    site = (ROOT / "playbooks" / "site.yml").read_text()
    assert [s.name for s in STAGES][-1] == "monitoring"
    assert "import_playbook: monitoring.yml" in site
    play = yaml.safe_load((ROOT / "playbooks" / "monitoring.yml").read_text())[0]
    assert play["roles"][0]["when"].startswith("(kiln_monitoring | default({})).enabled")
