"""Drift-aware re-apply: fingerprints, the manifest from task results, the node program against a
temp dir standing in for / (stand-in dpkg-query and systemctl), and the run-or-skip rules."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from kiln.drift import Decision, assess
from kiln.drift.remote import (
    NODE_SCRIPT,
    NodeProbe,
    declared_versions,
    node_command,
    payloads,
    probe_nodes,
)
from kiln.fleet import CommandOutcome, ExecResult, NodeResult, as_root
from kiln.inventory import require_valid
from kiln.paths import PLAYBOOKS_DIR
from kiln.plan import PlanOptions, make_plan
from kiln.plan.fingerprint import fingerprints
from kiln.profiles.slurm import DEFAULT_PLATFORM, load_slurm
from kiln.runner.events import EventRecorder
from kiln.runner.manifest import slim

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = ROOT / "inventories" / "sandbox"


# --- fingerprints ---------------------------------------------------------------------------


def _plan(inventory: Path, tmp_path: Path):
    return make_plan(require_valid(inventory), PlanOptions(), home=tmp_path / "state")


@pytest.fixture
def inventory(tmp_path):
    copy = tmp_path / "inventory"
    shutil.copytree(SANDBOX, copy)
    return copy


def test_fingerprints_are_stable_and_per_node(inventory, tmp_path):
    first = fingerprints(_plan(inventory, tmp_path))
    again = fingerprints(_plan(inventory, tmp_path))
    assert first == again
    assert set(first["base"]) == {"kiln-ctl", "kiln-node01", "kiln-node02"}
    assert len(set(first["base"].values())) == 3  # each node's own variables
    assert first["base"]["kiln-node01"] != first["slurm"]["kiln-node01"]


def test_a_node_variable_changes_that_node_only(inventory, tmp_path):
    before = fingerprints(_plan(inventory, tmp_path))
    hosts = inventory / "hosts.yml"
    text = hosts.read_text().replace("172.31.250.12", "172.31.250.42")
    hosts.write_text(text)
    after = fingerprints(_plan(inventory, tmp_path))
    assert after["nvidia"]["kiln-node02"] != before["nvidia"]["kiln-node02"]
    assert after["nvidia"]["kiln-node01"] == before["nvidia"]["kiln-node01"]
    # /etc/hosts changes: the base stage (which installs it) changes on every node
    assert all(after["base"][h] != before["base"][h] for h in before["base"])


def test_role_code_changes_only_the_stages_that_run_the_role(inventory, tmp_path):
    playbooks = tmp_path / "playbooks"
    shutil.copytree(PLAYBOOKS_DIR, playbooks, ignore=shutil.ignore_patterns("__pycache__"))
    plan = _plan(inventory, tmp_path)
    before = fingerprints(plan, playbooks)
    tasks = playbooks / "roles" / "power" / "tasks" / "main.yml"
    tasks.write_text(tasks.read_text() + "\n# a change\n")
    after = fingerprints(plan, playbooks)
    assert after["power"] != before["power"]
    assert after["slurm"] == before["slurm"] and after["base"] == before["base"]


def test_versions_and_extravars_change_the_fingerprint(inventory, tmp_path):
    plan = _plan(inventory, tmp_path)
    base = fingerprints(plan)
    options = PlanOptions(extravars={"something": 1})
    other = make_plan(plan.cluster, options, home=tmp_path / "state")
    assert fingerprints(other)["slurm"] != base["slurm"]


def test_a_skip_narrows_the_plan(inventory, tmp_path):
    cluster = require_valid(inventory)
    skip = {"base": frozenset({"kiln-node01", "kiln-ctl"}), "power": frozenset({"kiln-node01"})}
    plan = make_plan(cluster, PlanOptions(skip=skip), home=tmp_path / "state")
    hosts = {s.name: s.hosts for s in plan.stages}
    assert hosts["base"] == ("kiln-node02",) and hosts["power"] == ("kiln-node02",)
    assert hosts["slurm"] == ("kiln-ctl", "kiln-node01", "kiln-node02")


# --- the manifest, from the callback's results ------------------------------------------------


def _ok(host, action, res, n=1):
    return {
        "event": "runner_on_ok",
        "counter": n,
        "event_data": {"host": host, "task": "t", "resolved_action": action, "res": res},
    }


def test_the_manifest_is_gathered_from_ok_results():
    copy = {"changed": True, "dest": "/etc/chrony/chrony.conf", "checksum": "ab", "mode": "0644"}
    apt = {
        "changed": False,
        "invocation": {"module_args": {"name": ["chrony", "munge=0.5.14-6"], "state": "present"}},
    }
    loop = {"results": [{"name": "munge", "state": "started", "enabled": True}, {"skipped": True}]}
    recorder = EventRecorder("base")
    for n, (action, res) in enumerate(
        [
            ("ansible.builtin.template", slim(copy)),
            ("ansible.builtin.apt", slim(apt)),
            ("ansible.builtin.systemd_service", slim(loop)),
            ("ansible.builtin.command", {"changed": True}),
            (
                "ansible.builtin.apt",
                {"invocation": {"module_args": {"name": "x", "state": "absent"}}},
            ),
            ("ansible.builtin.lineinfile", {"invocation": {"module_args": {"path": "/etc/a"}}}),
        ]
    ):
        recorder(_ok("n1", action, res, n))
    failed = {"host": "n1", "task": "t", "resolved_action": "ansible.builtin.copy"}
    recorder({"event": "runner_on_failed", "event_data": {**failed, "res": {"dest": "/etc/b"}}})
    assert recorder.managed["n1"].to_dict() == {
        "files": ["/etc/a", "/etc/chrony/chrony.conf"],
        "packages": ["chrony", "munge"],
        "services": ["munge"],
    }


def test_slim_keeps_only_what_the_manifest_reads():
    kept = slim({"dest": "/etc/x", "checksum": "c", "diff": "big", "invocation": {"module_args": {
        "content": "secret", "dest": "/etc/x"}}})  # fmt: skip
    assert kept == {"dest": "/etc/x", "invocation": {"module_args": {"dest": "/etc/x"}}}


# --- the node program ---------------------------------------------------------------------------

STANDINS = {
    "dpkg-query": """\
        #!/bin/sh
        # dpkg-query -W -f FORMAT names...: the lines of $STATE/packages for the names asked
        shift 3
        for name in "$@"; do
          grep "^$name	" "$STATE/packages" || echo "dpkg-query: no package matching $name" >&2
        done
        """,
    "systemctl": """\
        #!/bin/sh
        # systemctl show --no-pager -p ... -- units...: one block per unit from $STATE/<unit>
        shift 5
        first=1
        for unit in "$@"; do
          [ $first = 1 ] || echo
          first=0
          cat "$STATE/$unit" 2>/dev/null || printf 'ActiveState=inactive\\nUnitFileState=\\n'
        done
        """,
}


@pytest.fixture
def node(tmp_path):
    """A temp dir standing in for /, with stand-in dpkg-query and systemctl on PATH."""
    root, bin_dir, state = tmp_path / "root", tmp_path / "bin", tmp_path / "state"
    for directory in (root / "etc", bin_dir, state):
        directory.mkdir(parents=True)
    for name, text in STANDINS.items():
        (bin_dir / name).write_text(textwrap.dedent(text))
        (bin_dir / name).chmod(0o755)
    (root / "etc" / "chrony.conf").write_text("server a\n")
    (state / "packages").write_text("chrony\t4.2-2\tii \nmunge\t0.5.14-6\tii \n")
    (state / "munge").write_text("ActiveState=active\nUnitFileState=enabled\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STATE": str(state)}

    def run(*args: str) -> dict:
        proc = subprocess.run(
            [sys.executable, str(NODE_SCRIPT), "--root", str(root), *args],
            capture_output=True, text=True, env=env, check=True, timeout=30,
        )  # fmt: skip
        return json.loads(proc.stdout)

    return root, state, run


def _record(run, **stages):
    import base64

    payload = {"records": stages, "remove": []}
    return run("record", base64.b64encode(json.dumps(payload).encode()).decode())


def test_record_then_probe_finds_no_drift(node):
    root, _, run = node
    entry = {"fingerprint": "f1", "run_id": "R1", "files": ["/etc/chrony.conf"],
             "packages": ["chrony", "munge"], "services": ["munge"]}  # fmt: skip
    assert _record(run, base=entry)["written"] == ["base"]
    applied = root / "var/lib/kiln/applied/base.json"
    assert applied.stat().st_mode & 0o777 == 0o600
    recorded = json.loads(applied.read_text())
    assert recorded["packages"] == {"chrony": "4.2-2", "munge": "0.5.14-6"}
    assert recorded["services"] == {"munge": {"active": "active", "enabled": "enabled"}}
    probe = run("probe")
    assert probe["stages"]["base"]["fingerprint"] == "f1"
    assert probe["stages"]["base"]["drift"] == [] and probe["pending"] == []


def test_the_probe_finds_a_changed_file_a_stopped_service_and_a_downgraded_package(node):
    root, state, run = node
    entry = {"fingerprint": "f1", "files": ["/etc/chrony.conf", "/etc/gone"],
             "packages": ["munge"], "services": ["munge"]}  # fmt: skip
    (root / "etc" / "gone").write_text("x")
    _record(run, slurm=entry)
    (root / "etc" / "chrony.conf").write_text("server evil\n")
    (root / "etc" / "gone").unlink()
    (state / "packages").write_text("munge\t0.5.13-1\tii \n")
    (state / "munge").write_text("ActiveState=inactive\nUnitFileState=enabled\n")
    (root / "var/lib/kiln/munge-restart-pending").write_text("")
    probe = run("probe")
    drift = {(d["kind"], d["name"]): d for d in probe["stages"]["slurm"]["drift"]}
    assert set(drift) == {("file", "/etc/chrony.conf"), ("file", "/etc/gone"),
                          ("package", "munge"), ("service", "munge")}  # fmt: skip
    assert drift[("file", "/etc/gone")]["now"] is None
    assert drift[("package", "munge")]["now"] == "0.5.13-1"
    assert drift[("service", "munge")]["now"]["active"] == "inactive"
    assert probe["pending"] == ["munge-restart-pending"]


def test_a_removed_record_and_an_unreadable_one(node):
    root, _, run = node
    _record(run, base={"fingerprint": "f"}, power={"fingerprint": "g"})
    import base64

    payload = base64.b64encode(json.dumps({"remove": ["power"]}).encode()).decode()
    assert run("record", payload)["removed"] == ["power"]
    (root / "var/lib/kiln/applied/nccl.json").write_text("{garbled")
    probe = run("probe")
    assert set(probe["stages"]) == {"base"} and "nccl.json" in probe["errors"][0]


# `slurmd -V` as real nodes print it (tests/fixtures/real/slurm-version/SOURCE.txt).
SLURM_VERSION = ROOT / "tests" / "fixtures" / "real" / "slurm-version"


def _daemon(root: Path, name: str, capture: str | None) -> None:
    """A stand-in daemon under root's /usr/sbin that prints `capture` for -V (None: remove it)."""
    path = root / "usr" / "sbin" / name
    if capture is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (SLURM_VERSION / capture).read_text()
    path.write_text(f"#!/bin/sh\n[ \"$1\" = -V ] && printf '%s' '{text}'\n")
    path.chmod(0o755)


@pytest.mark.parametrize(
    ("capture", "version"),
    [("slurmd-V_debian13_24.11.5.txt", "24.11.5"), ("slurmctld-V_debian13_24.11.5.txt", "24.11.5"),
     ("slurmd-V_debian12_22.05.8.txt", "22.05.8")],
)  # fmt: skip
def test_the_node_program_reads_the_real_version_outputs(capture, version):
    node_py = _node_module()
    assert node_py.parse_version((SLURM_VERSION / capture).read_text()) == version


def _node_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("kiln_drift_node", NODE_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_version_matching_follows_the_declared_precision():
    matches = _node_module().version_matches
    assert matches("24.11", "24.11.5") and matches("24.11", "24.11.0-0rc1")
    assert not matches("24.11", "24.05.8") and not matches("24.11", "25.11.1")
    assert matches("24.05.8", "24.05.8") and not matches("24.05.8", "24.05.9")
    assert not matches("24.11", None)


def test_the_probe_finds_a_slurm_daemon_at_another_version_or_missing(node):
    root, _, run = node
    _daemon(root, "slurmd", "slurmd-V_debian13_24.11.5.txt")
    _daemon(root, "slurmctld", "slurmctld-V_debian13_24.11.5.txt")
    _record(
        run, slurm={"fingerprint": "s", "versions": {"slurmd": "24.11", "slurmctld": "24.11.5"}}
    )
    assert run("probe")["stages"]["slurm"]["drift"] == []
    # By hand: slurmd replaced by another release, slurmctld removed.
    _daemon(root, "slurmd", "slurmd-V_debian12_22.05.8.txt")
    _daemon(root, "slurmctld", None)
    drift = run("probe")["stages"]["slurm"]["drift"]
    assert drift == [
        {"kind": "version", "name": "slurmctld", "recorded": "24.11.5", "now": None},
        {"kind": "version", "name": "slurmd", "recorded": "24.11", "now": "22.05.8"},
    ]
    decision = Decision("slurm", "n1", "drifted", tuple(drift))
    assert decision.describe() == (  # kiln plan --live says how far back 22.05 is
        "slurmctld -V not found, declared 24.11.5, slurmd -V 22.05.8, declared 24.11 (beyond "
        "Slurm 24.11's upgrade window: through 23.11 first)"
    )


def test_packages_are_read_from_rpm_on_an_rpm_system(node, tmp_path):
    root, state, run = node
    (tmp_path / "bin" / "dpkg-query").unlink()
    (root / "var" / "lib" / "rpm").mkdir(parents=True)
    # rpm -q --qf FORMAT names...: rpm's own answers, "package X is not installed" included
    rpm = tmp_path / "bin" / "rpm"
    rpm.write_text(
        textwrap.dedent("""\
        #!/bin/sh
        shift 3
        for name in "$@"; do
          grep "^$name	" "$STATE/rpms" || echo "package $name is not installed"
        done
        """)
    )
    rpm.chmod(0o755)
    (state / "rpms").write_text("slurm\t22.05.9-1.el9\tii\nmunge\t0.5.13-13.el9\tii\n")
    _record(run, slurm={"fingerprint": "s", "packages": ["munge", "slurm"]})
    recorded = json.loads((root / "var/lib/kiln/applied/slurm.json").read_text())
    assert recorded["packages"] == {"munge": "0.5.13-13.el9", "slurm": "22.05.9-1.el9"}
    (state / "rpms").write_text("munge\t0.5.13-13.el9\tii\n")
    assert run("probe")["stages"]["slurm"]["drift"] == [
        {"kind": "package", "name": "slurm", "recorded": "22.05.9-1.el9", "now": None}
    ]


def test_node_command_runs_the_shipped_source_as_root(tmp_path):
    plain = node_command("probe")
    assert plain.startswith("python3 -c ") and plain.endswith(" probe")
    ops = SimpleNamespace(name="n1", address="10.0.0.1", hostvars={"ansible_user": "ops"})
    command = as_root(ops, plain)
    assert command.startswith("sudo -n sh -c ")
    # Through a shell as a node would run it (sudo and python3 stand-ins): the quoting holds.
    (tmp_path / "sudo").write_text('#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')
    (tmp_path / "python3").symlink_to(sys.executable)
    (tmp_path / "sudo").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env,
                          check=True, timeout=30)  # fmt: skip
    assert json.loads(proc.stdout)["schema"] == "kiln-drift/1"


# --- the probe over SSH and the rules -----------------------------------------------------------


def _answer(name, status=CommandOutcome.OK, stdout="", error=None):
    return NodeResult(name, "10.0.0.1", status, 0 if status is CommandOutcome.OK else None, stdout,
                      error=error)  # fmt: skip


def test_probe_nodes_parses_and_fails_safe(inventory):
    cluster = require_valid(inventory)
    good = json.dumps({"stages": {"base": {"fingerprint": "f", "drift": []}}, "pending": [],
                       "errors": []})  # fmt: skip
    answers = [
        _answer("kiln-ctl", stdout=good),
        _answer("kiln-node01", CommandOutcome.UNREACHABLE, error="no route"),
        _answer("kiln-node02", stdout="sudo: a password is required"),
    ]

    def runner(nodes, command, **kwargs):
        assert [n.name for n in nodes] == ["kiln-ctl", "kiln-node01", "kiln-node02"]
        assert command == node_command("probe")
        return ExecResult(command, answers, 0.1, kwargs["fanout"], kwargs["timeout"])

    probes = probe_nodes(cluster.nodes, runner=runner)
    assert probes["kiln-ctl"].ok and probes["kiln-ctl"].stages["base"]["fingerprint"] == "f"
    assert not probes["kiln-node01"].ok and "no route" in probes["kiln-node01"].error
    assert not probes["kiln-node02"].ok and "unreadable" in probes["kiln-node02"].error


def test_run_or_skip():
    desired = {
        "preflight": {"a": "p", "b": "p", "c": "p"},
        "base": {n: f"base-{n}" for n in "abcdefg"},
        "slurm": {"a": "s-a", "b": "s-b"},
    }
    rec = {"base": {"fingerprint": "base-a", "drift": []}, "slurm": {"fingerprint": "s-a"}}
    drifted = [{"kind": "service", "name": "munge", "recorded": {"active": "active"},
                "now": {"active": "inactive"}}]  # fmt: skip
    probes = {
        "a": NodeProbe("a", True, rec),
        "b": NodeProbe(
            "b", True, {"base": {"fingerprint": "old"}, "slurm": {"fingerprint": "s-b"}}
        ),
        "c": NodeProbe("c", True, {"base": {"fingerprint": "base-c", "drift": drifted}}),
        "d": NodeProbe("d", True, {}),
        "e": NodeProbe("e", False, error="unreachable: no route"),
        "f": NodeProbe("f", True, {"base": {"fingerprint": "base-f"}}, pending=("x-pending",)),
        "g": NodeProbe("g", True, {"base": {"fingerprint": "base-g"}}),
    }
    result = assess(desired, probes, ["preflight", "base", "slurm"], failed_last={"g"})
    reasons = {s: {n: d.reason for n, d in nodes.items()} for s, nodes in result.decisions.items()}
    assert reasons["base"] == {"a": "unchanged", "b": "changed", "c": "drifted", "d": "no_record",
                               "e": "probe_failed", "f": "pending", "g": "failed_last"}  # fmt: skip
    assert reasons["slurm"] == {"a": "unchanged", "b": "unchanged"}
    assert reasons["preflight"] == {"a": "unchanged", "b": "with_others", "c": "with_others"}
    skip = result.skip()
    assert skip["base"] == {"a"} and skip["slurm"] == {"a", "b"} and skip["preflight"] == {"a"}
    described = {d.node: d.describe() for d in result.to_run()}
    assert "active active -> inactive" in described["c"]
    assert described["e"] == "probe_failed: unreachable: no route"
    # Asked for on its own (`--stages preflight`, kiln facts' source), preflight checks every
    # node: checking is all it does.
    alone = assess(desired, probes, ["preflight"])
    assert {n: d.reason for n, d in alone.decisions["preflight"].items()} == dict.fromkeys(
        "abc", "asked"
    )


def test_records_are_written_for_good_hosts_and_removed_for_bad_ones():
    stages = {  # stage -> host -> its status there
        "base": {"a": "changed", "b": "failed", "c": "not_run"},
        "slurm": {"a": "ok", "b": "aborted"},
    }
    managed = {"base": {"a": {"files": ["/etc/x"], "packages": [], "services": ["chrony"]}}}
    desired = {"base": {"a": "fa", "b": "fb", "c": "fc"}, "slurm": {"a": "sa", "b": "sb"}}
    work = payloads(stages, managed, desired, "RUN", lambda host: {"slurm": {"slurmd": "24.11"}})
    assert work["a"]["records"]["base"] == {"fingerprint": "fa", "run_id": "RUN",
        "files": ["/etc/x"], "packages": [], "services": ["chrony"], "versions": {}}  # fmt: skip
    # The munge key is written by a no_log task (censored result): the stage declares it.
    assert work["a"]["records"]["slurm"]["files"] == ["/etc/munge/munge.key"]
    assert work["a"]["records"]["slurm"]["versions"] == {"slurmd": "24.11"}
    assert work["b"] == {"records": {}, "remove": ["base", "slurm"]}
    assert "c" not in work  # never ran the stage: its record (if any) stays as it was


def test_the_declared_slurm_versions_per_node(inventory):
    """The slurm stage records slurmctld on a controller and slurmd on a compute node at the
    written kiln_versions.slurm; unset, at what the node's platform ships (slurm.yml)."""
    cluster = require_valid(inventory)
    declared = cluster.versions.slurm
    assert declared_versions(cluster, "kiln-ctl") == {"slurm": {"slurmctld": declared}}
    assert declared_versions(cluster, "kiln-node01") == {"slurm": {"slurmd": declared}}
    all_yml = inventory / "group_vars" / "all.yml"
    text = all_yml.read_text()
    all_yml.write_text(text.replace(f'  slurm: "{declared}"\n', ""))
    unset = require_valid(inventory)
    platform = unset.node("kiln-node01").hostvars.get("kiln_os") or DEFAULT_PLATFORM
    shipped = load_slurm().shipped(platform)
    assert declared_versions(unset, "kiln-node01") == {"slurm": {"slurmd": shipped.ships}}
