"""kiln.health's probes against recorded real outputs (tests/fixtures/real), each with a passing
and a failing case, and the expectations they are judged against."""

from __future__ import annotations

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.health import checks
from kiln.health.expect import NODE_FILES, expectations
from kiln.inventory.health_spec import DRAIN_XIDS, HealthSpec

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
CSV = shared_capture("nvidia-smi-query-gpu-csv/h100_80gb_hbm3_allfields_idle.csv").read_text()
NVLINK_BAD = (REAL / "nvidia-smi-nvlink" / "v100_sxm2_7gpu_inactive_links_azhpc.txt").read_text()
IBSTAT = shared_capture("ibstat/h100_cx7_some_eth_ports_down.txt").read_text()
PERF_ERRORS = (
    REAL / "perfquery" / "edr_switch_ib-i4l1s01_port1_extended_with_errors.txt"
).read_text()
XID_DRAIN = (REAL / "kernel-xid" / "akash_node4_dmesg_T_grep_NVRM_xid_43_31_94.txt").read_text()
XID_APP = (REAL / "kernel-xid" / "gpud_dmesg_ctime_xid_13_109_user_app.txt").read_text()


def expect(gpus: int = 1, **health) -> dict:
    return expectations("gpu001", "h100-sxm", gpus, ["mlx5_0", "mlx5_3"], None, health)


def by_check(findings: list[checks.Finding]) -> dict[str, checks.Finding]:
    return {f.check: f for f in findings}


def test_gpu_probe_passes_the_recorded_healthy_h100():
    found = by_check(checks.gpu_findings(CSV, expect(gpus=1)))
    assert set(found) == {
        "gpu_count",
        "gpu_model",
        "persistence",
        "ecc",
        "retired_pages",
        "remapped_rows",
        "throttle",
    }
    assert all(f.ok for f in found.values()), found


def test_gpu_probe_fails_a_node_missing_gpus():
    """The same real output where the inventory's profile says 8: seven GPUs are gone."""
    found = by_check(checks.gpu_findings(CSV, expect(gpus=8)))
    assert found["gpu_count"] == checks.Finding("gpu_count", False, "1 GPUs, expected 8")


def test_gpu_probe_fails_the_wrong_model():
    wrong = expectations("gpu001", "a100-sxm-80g", 1, [], None, None)
    assert not by_check(checks.gpu_findings(CSV, wrong))["gpu_model"].ok


@pytest.mark.parametrize(
    ("field", "value", "check"),
    [
        ("ecc.errors.uncorrected.volatile.total", "3", "ecc"),
        ("remapped_rows.failure", "Yes", "remapped_rows"),
        ("remapped_rows.pending", "Yes", "remapped_rows"),
        ("clocks_event_reasons.hw_thermal_slowdown", "Active", "throttle"),
        ("persistence_mode", "Disabled", "persistence"),
    ],
)
def test_gpu_probe_fails_each_fault(field, value, check):
    """The recorded row with one cell changed to the faulty value nvidia-smi prints."""
    header, row = CSV.splitlines()[:2]
    names = [h.strip() for h in header.split(",")]
    cells = [c.strip() for c in row.split(",")]
    assert len(names) == len(cells)
    cells[
        names.index(field) if field in names else [n.split(" [")[0] for n in names].index(field)
    ] = value
    found = by_check(checks.gpu_findings(header + "\n" + ", ".join(cells) + "\n", expect()))
    assert not found[check].ok and found[check].reading.startswith("gpu0")
    assert all(f.ok for name, f in found.items() if name != check)


def test_gpu_probe_unreadable_output_is_a_failure_not_a_crash():
    assert not checks.gpu_findings("NVIDIA-SMI has failed\n", expect())[0].ok


def test_nvlink_passes_gpus_whose_links_are_all_up_and_fails_inactive_or_missing_ones():
    v100 = {"gpu": {"count": 3}}  # GPUs 0-2 of the recorded bad node have every link up
    assert checks.nvlink_findings(NVLINK_BAD, v100)[0].ok
    found = checks.nvlink_findings(NVLINK_BAD, {"gpu": {"count": 8}})[0]
    assert not found.ok
    assert "gpu3 link 3,5 inactive" in found.reading and "gpu7 missing" in found.reading


def test_xid_fails_on_a_drain_xid_from_a_real_kernel_log():
    found = checks.xid_findings(XID_DRAIN, expect())[0]
    assert not found.ok
    assert found.reading.startswith("Xid 94 on PCI 0000:00:08: pid='<unknown>'")


def test_xid_passes_application_xids_and_other_kernel_lines():
    assert checks.xid_findings(XID_APP, expect())[0].ok  # Xid 13 and 109: a user's program
    assert checks.xid_findings(XID_DRAIN, expect(drain_xids=[79]))[0].ok  # the list is data


def test_ib_port_passes_active_rails_and_fails_a_port_down_or_slow():
    ok = expectations("n", "none", 0, ["mlx5_0", "0x946dae0300cde884"], None, None)  # name, GUID
    assert checks.ib_port_findings(IBSTAT, ok)[0].ok
    down = expectations("n", "none", 0, ["mlx5_0", "mlx5_2"], None, None)
    found = checks.ib_port_findings(IBSTAT, down)[0]
    assert found == checks.Finding(
        "ib_port", False, "mlx5_2 port 1 Down/Disabled, 40 Gb/s (want Active at 400 Gb/s)"
    )
    slow = expectations("n", "none", 0, ["mlx5_0"], {"link_rate_gbps": 800}, None)
    assert not checks.ib_port_findings(IBSTAT, slow)[0].ok
    missing = expectations("n", "none", 0, ["mlx5_99"], None, None)
    assert checks.ib_port_findings(IBSTAT, missing)[0].reading == "mlx5_99 missing"


def test_ib_errors_fail_counters_rising_fast_and_pass_a_steady_port():
    now = checks.ib_counters(PERF_ERRORS)
    assert now["PortXmitDiscards"] == 20046 and "PortXmitData" not in now
    zero = {name: 0 for name in now}
    rules = expect()
    steady = checks.ib_error_findings(
        {"mlx5_0": {"t": 0, "counters": now}}, {"mlx5_0": {"t": 60, "counters": now}}, rules
    )
    assert steady[0].ok
    rising = checks.ib_error_findings(
        {"mlx5_0": {"t": 0, "counters": zero}}, {"mlx5_0": {"t": 60, "counters": now}}, rules
    )[0]
    assert not rising.ok and "PortXmitDiscards +20046 in 1.0 min" in rising.reading
    first = checks.ib_error_findings({}, {"mlx5_0": {"t": 60, "counters": now}}, rules)
    assert first[0].ok  # a baseline, not a rate


def test_node_probes_pass_and_fail():
    mounts = "proc /proc proc rw 0 0\nnfs:/scratch /scratch nfs4 rw 0 0\n"
    assert checks.mount_findings(mounts, expect(mounts=["/scratch"]))[0].ok
    missing = checks.mount_findings(mounts, expect(mounts=["/scratch", "/data"]))[0]
    assert missing == checks.Finding("mount", False, "mount /data missing")
    assert checks.time_findings("yes\n")[0].ok
    assert not checks.time_findings("no\n")[0].ok
    assert checks.service_findings("slurmd", "active\n", "slurmd")[0].ok
    assert checks.service_findings("munge", "inactive\n", "munge")[0].reading == "munge inactive"
    disks = expect()["node"]["disks"]
    assert checks.disk_findings(dict.fromkeys(disks, 4096), expect())[0].ok
    full = checks.disk_findings({"/tmp": 10, "/var/spool/slurmd": None}, expect())[0]
    assert full.reading == "/tmp 10 MiB free < 1024 MiB; /var/spool/slurmd missing"


def test_the_kernel_clock_is_judged_as_timedated_judges_ntp_synchronized():
    """systemd-timedated's ntp_synced(): maxerror under 16 s; STA_UNSYNC (0x40) ignored."""
    synced = checks.kernel_time_findings(250_000, 0x2001)  # STA_PLL | STA_NANO: a daemon's
    assert synced == [
        checks.Finding("time_sync", True, "clock synchronised (kernel max error 0.25 s)")
    ]
    unsynced = checks.kernel_time_findings(16_000_000, 0x0040)  # the kernel's value at boot
    assert unsynced == [
        checks.Finding(
            "time_sync", False, "clock not synchronised (kernel max error 16 s, STA_UNSYNC)"
        )
    ]
    assert checks.kernel_time_findings(15_999_999, 0x0040)[0].ok  # RTC-only flag, still synced


def test_expectations_come_from_the_profile_and_the_inventory():
    h100 = expectations("gpu001", "h100-sxm", 8, ["mlx5_0"], {"link_rate_gbps": 400}, None)
    assert h100["gpu"] == {
        "model": "h100-sxm",
        "count": 8,
        "product_names": ["NVIDIA H100 80GB HBM3"],
        "nvlink": True,
        "fabric_manager": True,
        "persistence_mode": True,
    }
    assert h100["fabric"] == {"hcas": ["mlx5_0"], "rate_gbps": 400}
    assert h100["xids"] == list(DRAIN_XIDS) == [48, 63, 64, 74, 79, 92, 94, 95, 119, 120]
    cpu = expectations("cpu01", "none", 0, [], None, {"mounts": ["/scratch"]})
    assert cpu["gpu"] is None and cpu["fabric"] is None  # their probes are skipped
    assert cpu["node"]["mounts"] == ["/scratch"] and cpu["auto_resume"] is False


@pytest.mark.parametrize(
    "bad",
    [
        {"node_state": "BUSY"},
        {"skip": ["gpus"]},
        {"mounts": ["scratch"]},
        {"interval": 0},
        {"auto_resume": "yes"},
        {"enabled": True, "typo": 1},
    ],
)
def test_health_spec_refuses_bad_values(bad):
    with pytest.raises(ValueError):
        HealthSpec.model_validate(bad)


def test_the_node_files_exist_and_import_nothing_outside_them():
    """The health role copies NODE_FILES onto nodes: every kiln import in them is among them."""
    import ast

    package = Path(checks.__file__).resolve().parents[1]
    shipped = {
        f.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for f in NODE_FILES
    }
    shipped = {("kiln." + s) if s != "__init__" else "kiln" for s in shipped}
    for name in NODE_FILES:
        tree = ast.parse((package / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kiln"):
                assert node.module in shipped, f"{name} imports {node.module}, not shipped"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("kiln") for a in node.names), name
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[0] in ("pydantic", "yaml", "jinja2", "typer", "rich")
            ):
                raise AssertionError(f"{name} imports {node.module}: nodes have stdlib only")


def test_slurm_conf_names_the_program_only_when_the_inventory_turns_it_on(tmp_path):
    import shutil

    import yaml

    from kiln.inventory import require_valid
    from kiln.plan.files import render_files

    source = Path(__file__).resolve().parents[1] / "fixtures" / "burnin" / "cpu2" / "inventory"
    off = next(f for f in render_files(require_valid(source)) if f.name == "slurm.conf")
    assert "HealthCheck" not in off.content and "Prolog" not in off.content
    inventory = tmp_path / "inventory"
    shutil.copytree(source, inventory)
    settings_file = next(inventory.glob("group_vars/all.y*ml"))
    settings = yaml.safe_load(settings_file.read_text()) or {}
    settings["kiln_health"] = {"enabled": True, "interval": 60, "node_state": "IDLE,CYCLE"}
    settings_file.write_text(yaml.safe_dump(settings))
    on = next(f for f in render_files(require_valid(inventory)) if f.name == "slurm.conf")
    lines = [line for line in on.content.splitlines() if line.startswith(("Health", "Prolog"))]
    assert lines == [
        "HealthCheckProgram=/usr/local/sbin/kiln-health",
        "HealthCheckInterval=60",
        "HealthCheckNodeState=IDLE,CYCLE",
        "Prolog=/usr/local/sbin/kiln-health-prolog",
    ]


def test_kiln_health_reads_each_nodes_answer():
    import json

    from kiln.health.results import node_command, node_entry, read_document

    assert node_command() == "/usr/local/sbin/kiln-health --report"  # as root: fleet.as_root
    assert node_command(last=True) == "cat /var/lib/kiln/health/last.json"
    document = {"kind": "kiln-health", "ok": False, "findings": [{"check": "mount", "ok": False}]}
    assert read_document("noise\n" + json.dumps(document)) == document
    assert read_document(json.dumps(document, indent=1)) == document  # last.json
    assert node_entry("n1", "ok", 0, "healthy: 5 checks pass\n")["ok"]  # text: the exit code
    assert not node_entry("n1", "failed", 1, "FAIL mount: mount /x missing\n")["ok"]
    assert not node_entry("n1", "unreachable", None, "")["ok"]
    entry = node_entry("n1", "ok", 0, json.dumps(document))
    assert not entry["ok"] and entry["failing"] == [{"check": "mount", "ok": False}]
    unchecked = {"check": "time_sync", "ok": None, "reading": "probe time_sync could not check"}
    document = {"kind": "kiln-health", "ok": True, "findings": [unchecked]}
    entry = node_entry("n1", "ok", 0, json.dumps(document))
    assert entry["ok"] and entry["failing"] == [] and entry["unchecked"] == [unchecked]


def test_the_inventory_knows_every_check_the_node_program_runs():
    # Two lists by necessity (inventory sits below health; checks.py ships to nodes stdlib-only):
    # kiln_health.skip and prolog_checks must accept exactly the checks there are.
    from kiln.health import checks
    from kiln.inventory.health_spec import CHECK_IDS

    assert CHECK_IDS == checks.CHECKS
