"""A node's vendor RMA bundle (issue 33): kiln.survey.rma.write_bundle.

The node's side runs for real, in a local `sh`, with stand-ins on PATH that replay recorded
outputs: the slurm_node role's identity reader itself over a real B200 `nvidia-smi -q -x`
(shared capture), journalctl and dmesg replaying real kernel Xid captures
(tests/fixtures/real/kernel-xid), ipmitool replaying a real BMC sensor listing. Only SSH is
left out: the runner is the fake. The local side reads run records written here the way the
runner and the burn-in write them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from captures import real_captures, shared_capture
from kiln import __version__
from kiln.errors import InvalidInputError
from kiln.fleet import CommandOutcome, ExecResult, NodeResult
from kiln.judging import BurninReport
from kiln.judging.verdicts import Action, Severity, Verdict
from kiln.records.burnin import save_report
from kiln.records.runs import RunRecord
from kiln.survey import rma
from kiln.survey.rma import BundlePart, write_bundle
from slurm_inventory import slurm_cluster

ROOT = Path(__file__).resolve().parents[2]
READER = ROOT / "playbooks" / "roles" / "slurm_node" / "files" / "kiln-node-identity"
B200 = shared_capture("nvidia-smi-q-x/b200_8gpu_fabric_completed_clique0_k8stestinfra.xml")
XIDS = {path.name: path for path in real_captures("kernel-xid", "*.txt")}
XID_DMESG_T = XIDS["akash_node4_dmesg_T_grep_NVRM_xid_43_31_94.txt"]  # Xid 43, 31, 94
XID_CTIME = XIDS["gpud_dmesg_ctime_xid_13_109_user_app.txt"]  # Xid 13, 109
# A real BMC's sensor listing (HP ProLiant DL360, `ipmitool sdr elist full`, a failed PSU). No
# real `ipmitool sensor` capture is recorded yet; the bundle copies the BMC's text unread, so any
# real listing shows that it arrives whole.
SENSORS = ROOT / "tests" / "fixtures" / "power" / "real" / "sdr_elist_full_hp_proliant_dl360.txt"
# A real `ipmitool sel elist` (three entries quoted in sosreport/sos issue 2015; SOURCE.txt).
SEL = (ROOT / "tests/fixtures/real/ipmitool/sel_elist_sosreport_issue_2015.txt").read_text()
NODE = "cortex-01"
FLOOR_MESSAGE = "gemm 287.4 TFLOPS/GPU < floor 400"


def xid_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if "NVRM: Xid" in line]


def program(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}")
    path.chmod(0o755)
    return path


@pytest.fixture
def node_side(tmp_path, monkeypatch):
    """A stand-in node: a bin directory that `sh` searches first, the identity reader over a
    stand-in sysfs and the B200 capture, and kiln-health's last.json."""
    bin_dir = tmp_path / "node" / "bin"
    for tool in ("mktemp", "tail", "sed", "grep", "cat", "rm"):
        bin_dir.mkdir(parents=True, exist_ok=True)
        (bin_dir / tool).symlink_to(shutil.which(tool))
    program(bin_dir / "nvidia-smi", f"cat {B200}\n")
    sysfs = tmp_path / "node" / "root"
    (sysfs / "sys/class/dmi/id").mkdir(parents=True)
    (sysfs / "sys/class/dmi/id/product_serial").write_text("SN-PRODUCT-7\n")
    (sysfs / "sys/class/dmi/id/board_serial").write_text("SN-BOARD-9\n")
    (sysfs / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    (sysfs / "sys/class/infiniband/mlx5_0/node_guid").write_text("b8ce:f603:00a1:0001\n")
    reader = program(
        tmp_path / "node" / "node-identity", f"exec {sys.executable} {READER} --root {sysfs}\n"
    )
    monkeypatch.setattr(rma, "IDENTITY_READER", str(reader))
    last = tmp_path / "node" / "last.json"
    document = {
        "kind": "kiln-health", "version": 1, "node": NODE, "time": "2026-03-14T02:15:00Z",
        "subset": "all", "duration_s": 0.4, "ok": False,
        "findings": [{"check": "xid", "ok": False, "reading": "Xid 94 on 0000:00:08"}],
        "action": {"verb": "drain", "reason": "kiln: xid 94", "why": ""},
    }  # fmt: skip
    last.write_text(json.dumps(document, indent=1) + "\n")
    monkeypatch.setattr("kiln.health.results.LAST", str(last))
    monkeypatch.setattr("kiln.fleet.ssh.getpass.getuser", lambda: "root")  # no sudo wrapping
    return bin_dir, document


def with_kernel_log(bin_dir: Path, journal: Path | None, dmesg: Path | None) -> None:
    program(bin_dir / "journalctl", f"cat {journal}\n" if journal else "exit 0\n")
    program(bin_dir / "dmesg", f"cat {dmesg}\n" if dmesg else "echo 'dmesg: not allowed' >&2\n"
            "exit 1\n")  # fmt: skip


def with_ipmitool(bin_dir: Path) -> None:
    sel = bin_dir.parent / "sel.txt"
    sel.write_text(SEL)
    program(bin_dir / "ipmitool", f'case "$1" in sensor) cat {SENSORS};; sel) cat {sel};; '
            "*) exit 1;; esac\n")  # fmt: skip


def local_sh(bin_dir: Path, calls: list | None = None, cut: str | None = None):
    """A runner that runs the command in a local `sh` on `bin_dir`'s PATH; `cut`: the output
    ends before that text, as a script killed at its deadline."""

    def runner(nodes, command, *, fanout, timeout):
        if calls is not None:
            calls.append((nodes, command, fanout, timeout))
        env = {"PATH": str(bin_dir), "TMPDIR": str(bin_dir.parent)}
        proc = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                              env=env, timeout=60, check=False)  # fmt: skip
        status = CommandOutcome.OK if proc.returncode == 0 else CommandOutcome.FAILED
        result = NodeResult(nodes[0].name, nodes[0].address, status, proc.returncode,
                            proc.stdout, proc.stderr)  # fmt: skip
        if cut is not None:
            before = proc.stdout[: re.search(cut, proc.stdout).start()]
            killed = f"still running after {timeout:g}s"
            result = NodeResult(nodes[0].name, nodes[0].address, CommandOutcome.TIMEOUT,
                                stdout=before, error=killed)  # fmt: skip
        return ExecResult(command, [result], 0.1, fanout, timeout)

    return runner


@pytest.fixture
def cluster(tmp_path):
    return slurm_cluster(tmp_path / "inventory")


def _report(cluster_name: str, run_id: str, failing: bool) -> BurninReport:
    W, DRAIN, LOOK = Severity.WARNING, Action.DRAIN, Action.INVESTIGATE
    verdicts = [Verdict("node", NODE, "checksum", True, node=NODE)]
    if failing:
        verdicts += [
            Verdict("node", NODE, "gemm_floor", False, 287.4, 400.0, "TFLOPS", W, DRAIN,
                    FLOOR_MESSAGE, node=NODE),
            Verdict("gpu", f"{NODE}/gpu3", "gemm_floor", False, 287.4, 400.0, "TFLOPS", W,
                    DRAIN, "gpu3 287.4 TFLOPS < floor 400", node=NODE),
            Verdict("link", f"{NODE}<->oxygen-04 rail1", "ib_link", False, 151.0, 360.0,
                    "Gb/s", W, LOOK, "ib rail1 slow; both nodes fine with other peers"),
            Verdict("node", "oxygen-04", "result", False, severity=Severity.CRITICAL,
                    action=DRAIN, message="no result", node="oxygen-04"),
        ]  # fmt: skip
    return BurninReport(
        cluster_name, run_id, "quick",
        node_profiles={NODE: "a100-sxm-80g", "oxygen-04": "none"},
        gpu_tflops={NODE: [402.0, 401.5, 403.1, 287.4, 400.9, 402.2, 401.7, 402.8]},
        verdicts=verdicts,
    )  # fmt: skip


@pytest.fixture
def home(tmp_path, cluster):
    """Run records: preflight facts in an older run (a newer preflight held other nodes only,
    a newer run of another inventory held this name too); burn-in reports, the newest of this
    cluster failing the node, a newer one of another cluster."""
    home = tmp_path / "home"
    inventory = str(cluster.inventory_dir.resolve())
    facts = {"os": "Debian 13", "kernel": "6.12.38+deb13-amd64", "cpus": 224, "gpus": 8}
    for run_id, where, held in [
        ("20260301T000000Z-aaaaaa", inventory, {NODE: facts, "oxygen-04": {"cpus": 8}}),
        ("20260302T000000Z-bbbbbb", inventory, {"oxygen-04": {"cpus": 8}}),
        ("20260303T000000Z-cccccc", str(tmp_path / "elsewhere"), {NODE: {"cpus": 1}}),
    ]:
        record = RunRecord.create(home, run_id)
        record.write_summary({"inventory": where, "stages": [{"name": "preflight"}]})
        record.write_facts(held)
    for age, (cluster_name, run_id, failing) in enumerate(
        [("other", "b3", False), ("kiln", "b2", True), ("kiln", "b1", False)]
    ):
        (home / "runs" / run_id).mkdir(parents=True)
        path = save_report(home / "runs" / run_id, _report(cluster_name, run_id, failing))
        os.utime(path, (1_800_000_000 - age * 3600,) * 2)
    return home


def test_the_bundle_holds_serials_facts_failing_verdicts_health_xids_and_bmc(
    tmp_path, cluster, home, node_side
):
    bin_dir, health = node_side
    with_kernel_log(bin_dir, XID_DMESG_T, None)
    with_ipmitool(bin_dir)
    calls: list = []
    history = [{"state": "in_service", "at": "2026-03-01T00:00:00Z"},
               {"state": "failed", "at": "2026-03-14T02:20:00Z", "why": FLOOR_MESSAGE}]  # fmt: skip
    bundle = tmp_path / "bundle"
    result = write_bundle(cluster, NODE, bundle, history=history, home=home,
                          runner=local_sh(bin_dir, calls), timeout=90)  # fmt: skip

    assert len(calls) == 1  # one SSH round trip
    assert [n.name for n in calls[0][0]] == [NODE] and calls[0][2:] == (1, 90)
    assert all(part.ok for part in result.parts), result.parts
    assert sorted(p.name for p in bundle.iterdir()) == sorted(
        [part.name for part in result.parts] + ["MANIFEST.json"]
    )

    identity = json.loads((bundle / "identity.json").read_text())
    serials = re.findall(r"<serial>([^<]*)</serial>", B200.read_text())
    assert len(serials) == 8 and identity["gpu_serials"] == serials
    assert (identity["product_serial"], identity["board_serial"]) == ("SN-PRODUCT-7", "SN-BOARD-9")
    assert identity["hca_guids"] == {"mlx5_0": "b8ce:f603:00a1:0001"}
    assert identity["missing"] == [] and identity["line"].startswith("board=SN-PRODUCT-7/")

    facts = json.loads((bundle / "facts.json").read_text())
    assert facts["run_id"] == "20260301T000000Z-aaaaaa" and facts["facts"]["cpus"] == 224

    burnin = json.loads((bundle / "burnin-failures.json").read_text())
    assert (burnin["run_id"], burnin["verdict"]) == ("b2", "failed")
    assert burnin["drain_reason"].startswith("kiln: " + FLOOR_MESSAGE)
    floor = next(v for v in burnin["failures"] if v["name"] == NODE)
    assert (floor["check"], floor["measured"], floor["threshold"], floor["unit"]) == (
        "gemm_floor",
        287.4,
        400.0,
        "TFLOPS",
    )
    names = [v["name"] for v in burnin["failures"]]
    assert names == [NODE, f"{NODE}/gpu3", f"{NODE}<->oxygen-04 rail1"]  # not oxygen-04's
    assert burnin["gpu_tflops"][3] == 287.4

    assert json.loads((bundle / "health.json").read_text()) == health
    assert (bundle / "xid.log").read_text().splitlines() == xid_lines(XID_DMESG_T)
    assert len(xid_lines(XID_DMESG_T)) == 4  # the "GPU at PCI" and serial lines left out
    assert (bundle / "bmc-sensors.txt").read_text() == SENSORS.read_text()
    assert (
        "Power Supply 1   | 06h | ok  | 10.1 | 0 Watts" in (bundle / "bmc-sensors.txt").read_text()
    )
    assert (bundle / "bmc-sel.txt").read_text() == SEL

    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    assert (manifest["node"], manifest["kiln"], manifest["history"]) == (NODE, __version__, history)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", manifest["time"])
    assert manifest["parts"] == [part.to_dict() for part in result.parts]
    assert result.to_dict()["complete"] is True and result.to_dict()["directory"] == str(bundle)
    assert not list(bundle.glob(".*.tmp"))


def test_a_node_without_ipmitool_is_said_in_the_manifest(tmp_path, cluster, home, node_side):
    if shutil.which("ipmitool", path="/usr/local/sbin:/usr/sbin:/sbin"):
        pytest.skip("this machine has ipmitool in a directory the node script appends to PATH")
    bin_dir, _ = node_side
    with_kernel_log(bin_dir, XID_DMESG_T, None)
    result = write_bundle(cluster, NODE, tmp_path / "b", home=home, runner=local_sh(bin_dir))
    parts = {part.name: part for part in result.parts}
    missing = f"ipmitool not installed on {NODE}"
    assert parts["bmc-sensors.txt"] == BundlePart("bmc-sensors.txt", False, missing)
    assert parts["bmc-sel.txt"] == BundlePart("bmc-sel.txt", False, missing)
    assert not (tmp_path / "b" / "bmc-sensors.txt").exists()
    assert all(parts[name].ok for name in ("identity.json", "xid.log", "health.json"))
    manifest = json.loads((tmp_path / "b" / "MANIFEST.json").read_text())
    assert {"name": "bmc-sel.txt", "ok": False, "detail": missing} in manifest["parts"]


def test_an_unreachable_node_still_gets_its_run_records(tmp_path, cluster, home, monkeypatch):
    monkeypatch.setattr("kiln.fleet.ssh.getpass.getuser", lambda: "ops")
    calls = []

    def unreachable(nodes, command, *, fanout, timeout):
        calls.append(command)
        answer = NodeResult(NODE, "10.0.0.11", CommandOutcome.UNREACHABLE,
                            error="no SSH answer within 10s")  # fmt: skip
        return ExecResult(command, [answer], 10.0, fanout, timeout)

    result = write_bundle(cluster, NODE, tmp_path / "b", home=home, runner=unreachable)
    assert calls[0].startswith("sudo -n sh -c ")  # as root, from a login user that is not
    parts = {part.name: part for part in result.parts}
    for name in ("identity.json", "health.json", "xid.log", "bmc-sensors.txt", "bmc-sel.txt"):
        assert parts[name] == BundlePart(
            name, False, f"{NODE} unreachable: no SSH answer within 10s"
        )
    assert parts["facts.json"].ok and parts["burnin-failures.json"].ok
    manifest = json.loads((tmp_path / "b" / "MANIFEST.json").read_text())
    assert [p["ok"] for p in manifest["parts"]].count(False) == 5
    assert result.to_dict()["complete"] is False


def test_a_script_killed_at_its_deadline_keeps_the_sections_it_finished(
    tmp_path, cluster, home, node_side
):
    bin_dir, _ = node_side
    with_kernel_log(bin_dir, XID_DMESG_T, None)
    with_ipmitool(bin_dir)
    runner = local_sh(bin_dir, cut=r"==kiln-rma-\w+ begin sensors")
    result = write_bundle(cluster, NODE, tmp_path / "b", home=home, runner=runner, timeout=5)
    parts = {part.name: part for part in result.parts}
    assert parts["identity.json"].ok and parts["xid.log"].ok and parts["health.json"].ok
    assert parts["bmc-sensors.txt"].detail == f"not reached: the script on {NODE} ran past 5s"
    assert not parts["bmc-sel.txt"].ok


@pytest.mark.parametrize(
    ("journal", "dmesg", "expected", "detail"),
    [
        (None, XID_CTIME, xid_lines(XID_CTIME), ""),  # an empty journal: dmesg read instead
        (XID_CTIME, None, xid_lines(XID_CTIME), ""),
        (SENSORS, None, [], ""),  # a kernel log with no Xid: an empty xid.log, collected
        (None, None, None, f"kernel log not readable on {NODE}: dmesg: not allowed"),
    ],
)
def test_xid_lines_from_journalctl_else_dmesg(
    tmp_path, cluster, home, node_side, journal, dmesg, expected, detail
):
    bin_dir, _ = node_side
    with_kernel_log(bin_dir, journal, dmesg)
    result = write_bundle(cluster, NODE, tmp_path / "b", home=home, runner=local_sh(bin_dir))
    part = next(part for part in result.parts if part.name == "xid.log")
    assert (part.ok, part.detail) == (expected is not None, detail)
    if expected is not None:
        assert (tmp_path / "b" / "xid.log").read_text().splitlines() == expected


def test_no_run_record_is_said_not_raised(tmp_path, cluster, node_side):
    bin_dir, _ = node_side
    with_kernel_log(bin_dir, XID_DMESG_T, None)
    result = write_bundle(cluster, NODE, tmp_path / "b", home=tmp_path / "empty",
                          runner=local_sh(bin_dir))  # fmt: skip
    parts = {part.name: part for part in result.parts}
    assert not parts["facts.json"].ok and "no run record" in parts["facts.json"].detail
    assert not parts["burnin-failures.json"].ok
    assert f"judged {NODE}" in parts["burnin-failures.json"].detail


def never(*args, **kwargs):
    raise AssertionError("the node was asked")


def test_an_unknown_node_raises_and_writes_nothing(tmp_path, cluster, home):
    with pytest.raises(InvalidInputError, match="cortex-1 is not a host") as raised:
        write_bundle(cluster, "cortex-1", tmp_path / "b", home=home, runner=never)
    assert "cortex-01" in (raised.value.hint or "")
    assert not (tmp_path / "b").exists()


def test_a_directory_that_holds_anything_is_refused(tmp_path, cluster, home):
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "notes.txt").write_text("mine\n")
    with pytest.raises(InvalidInputError, match="is not empty"):
        write_bundle(cluster, NODE, bundle, home=home, runner=never)
    assert [p.name for p in bundle.iterdir()] == ["notes.txt"]
    (tmp_path / "file").write_text("")
    with pytest.raises(InvalidInputError, match="not a directory"):
        write_bundle(cluster, NODE, tmp_path / "file", home=home, runner=never)


def test_section_markers_carry_a_token_no_output_can_forge():
    other = "==kiln-rma-000000000000"
    forged = f"{other} begin identity\nboard=X/Y\n\n{other} end identity 0\n"
    assert rma.read_sections(forged, "==kiln-rma-abcdefabcdef") == {}
    script = rma.node_script("==kiln-rma-abcdefabcdef")
    assert not re.search(r"@[A-Z_]+@", script)  # every placeholder filled


def test_the_bundle_runs_the_reader_where_the_role_installs_it():
    role = (ROOT / "playbooks/roles/slurm_node/vars/main.yml").read_text()
    assert f"__slurm_node_identity_reader: {rma.IDENTITY_READER}\n" in role
