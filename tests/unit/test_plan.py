"""kiln plan: batches, stage targets and the generated files against golden copies."""

import json
from pathlib import Path

import pytest

from kiln.app import main
from kiln.examples import example_inventory, write_example
from kiln.inventory import require_valid
from kiln.inventory.batches import hosts_per_batch, split_batches
from kiln.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example-h100"
GOLDEN = ROOT / "tests" / "fixtures" / "golden" / "example-h100"


def run(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


@pytest.mark.parametrize(
    ("size", "hosts", "expected"),
    [("25%", 128, 32), ("10%", 5, 1), ("100%", 7, 7), (8, 128, 8), (500, 3, 3), ("1%", 0, 0)],
)
def test_hosts_per_batch_follows_ansible_serial(size, hosts, expected):
    assert hosts_per_batch(size, hosts) == expected


def test_split_batches_keeps_order_and_remainder():
    hosts = [f"n{i}" for i in range(10)]
    assert split_batches(hosts, 4) == [hosts[0:4], hosts[4:8], hosts[8:10]]


def test_committed_example_is_what_the_generator_writes():
    for relative, content in example_inventory(128).items():
        assert (EXAMPLE / relative).read_text() == content, relative


@pytest.mark.parametrize("name", ["slurm.conf", "gres.conf", "cgroup.conf", "topology.conf"])
def test_generated_files_match_golden(tmp_path, capsys, name):
    code, _, _ = run(["plan", str(EXAMPLE), "--output", str(tmp_path)], capsys)
    assert code == 0
    assert (tmp_path / name).read_text() == (GOLDEN / name).read_text()


def test_slurm_conf_groups_identical_hardware_into_hostlists():
    plan = make_plan(require_valid(EXAMPLE))
    slurm_conf = next(f for f in plan.files if f.name == "slurm.conf").content
    node_lines = [line for line in slurm_conf.splitlines() if line.startswith("NodeName=")]
    assert node_lines == [
        "NodeName=gpu[001-128] CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 "
        "ThreadsPerCore=2 RealMemory=2000000 Gres=gpu:h100:8 State=UNKNOWN"
    ]
    assert "PartitionName=debug Nodes=gpu[001-032] Default=NO MaxTime=01:00:00 State=UP" in (
        slurm_conf
    )


def test_mixed_hardware_gets_one_node_line_per_shape(tmp_path):
    write_example(tmp_path, 8)
    host_vars = tmp_path / "host_vars"
    host_vars.mkdir()
    (host_vars / "gpu008.yml").write_text("---\nkiln_real_memory_mb: 1000000\n")
    plan = make_plan(require_valid(tmp_path))
    slurm_conf = next(f for f in plan.files if f.name == "slurm.conf").content
    node_lines = [line for line in slurm_conf.splitlines() if line.startswith("NodeName=")]
    assert [line.split()[0] for line in node_lines] == ["NodeName=gpu[001-007]", "NodeName=gpu008"]


def test_plan_json_lists_stages_batches_and_files(capsys):
    code, out, _ = run(["plan", str(EXAMPLE), "--json", "--batch-size", "25%"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["kiln"] == "plan" and document["schema_version"] == 1
    assert [f["name"] for f in document["files"]] == [
        "slurm.conf",
        "gres.conf",
        "cgroup.conf",
        "topology.conf",
    ]
    for stage in document["stages"]:
        if stage["name"] == "preflight":
            # 25% of 129 hosts rounds down to 32 per batch, as Ansible's serial does.
            assert stage["host_count"] == 129
            assert stage["batches"][0] == "slurm-ctl01,gpu[001-031]"
            assert stage["batches"][-1] == "gpu128"


def test_detailed_exitcode_reports_pending_changes(tmp_path, capsys):
    assert run(["plan", str(EXAMPLE), "-o", str(tmp_path), "--detailed-exitcode"], capsys)[0] == 4
    assert run(["plan", str(EXAMPLE), "-o", str(tmp_path), "--detailed-exitcode"], capsys)[0] == 0


def test_plan_refuses_an_invalid_inventory_and_writes_nothing(tmp_path, capsys):
    write_example(tmp_path / "inv", 4)
    (tmp_path / "inv" / "group_vars" / "kiln_compute.yml").write_text(
        "---\nkiln_gpu_model: h100-sxn\n"
    )
    code, _, err = run(["plan", str(tmp_path / "inv"), "-o", str(tmp_path / "out")], capsys)
    assert code == 2
    assert "h100-sxn" in err and "did you mean 'h100-sxm'" in err
    assert not (tmp_path / "out").exists()


def test_bad_batch_size_is_a_usage_error(capsys):
    assert run(["plan", str(EXAMPLE), "--batch-size", "0%"], capsys)[0] == 2


def test_readme_documents_every_kiln_key():
    from kiln.inventory.schema import KEYS

    readme = (ROOT / "README.md").read_text()
    missing = [key for key in KEYS if f"`{key}`" not in readme]
    assert not missing


def test_etc_hosts_is_rendered_once_for_every_node():
    from kiln.plan.files import render_etc_hosts

    cluster = require_valid(EXAMPLE)
    lines = render_etc_hosts(cluster).content.splitlines()
    assert "10.0.0.10\tslurm-ctl01" in lines
    assert "10.1.0.128\tgpu128" in lines
    assert len([line for line in lines if line.startswith("10.")]) == len(cluster.nodes)


def test_export_carries_the_validated_versions_with_defaults_filled(tmp_path):
    """The nvidia and nccl stages read kiln_versions; a partial one gets the table's defaults."""
    from kiln.inventory.export import export_inventory
    from kiln.profiles import load_compat

    inventory = tmp_path / "inv"
    write_example(inventory, 4)
    group_vars = inventory / "group_vars" / "all.yml"
    text = group_vars.read_text()
    assert "kiln_versions" in text
    exported = json.loads(export_inventory(require_valid(inventory), tmp_path / "out").read_text())
    assert exported["all"]["vars"]["kiln_versions"] == {
        "driver_branch": 570,
        "cuda": "12.8",
        "nccl": "2.25.1",
        "slurm": "24.05.8",
    }
    assert all(
        "kiln_versions" not in (variables or {}) for variables in exported["all"]["hosts"].values()
    )
    default = load_compat().default_versions().model_dump(exclude_none=True)
    minimal = tmp_path / "minimal"
    minimal.mkdir()
    (minimal / "hosts.yml").write_text(
        "all:\n  children:\n    kiln_controllers:\n      hosts: {ctl: {kiln_gpu_model: none}}\n"
        "    kiln_compute:\n      hosts: {gpu001: {kiln_gpu_model: h100-sxm, kiln_rack: r1}}\n"
    )
    exported = json.loads(export_inventory(require_valid(minimal), tmp_path / "o2").read_text())
    # An undeclared Slurm stays unset: the slurm roles install what the OS ships (22.05.8 on
    # debian-12), never the table's newest, which Debian's archive does not carry.
    assert exported["all"]["vars"]["kiln_versions"] == {**default, "slurm": None}
    from kiln.profiles.slurm import pin_filter

    assert pin_filter(exported["all"]["vars"]["kiln_versions"]["slurm"]) == "22.05.8"
