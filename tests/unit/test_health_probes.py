"""The node program in process (kiln.health.node.check and main) on a CPU node, with stand-in
tools on PATH: `timedatectl` replaying the real texts it prints without D-Bus
(tests/fixtures/real/timedatectl), `systemctl`, and the Slurm double of tests/slurm_doubles.py
(Slurm 22.05's scontrol answers and error texts).

Issue 27: a probe that cannot run says "could not check" (not a failure, never a drain); the
time_sync probe reads the kernel clock when timedatectl cannot reach D-Bus (the sandbox's node
image); the Prolog drains a failing node itself with `kiln:health:<check>: <reading>` before its
exit 1, so the reason operators see names the check, not Slurm's "Prolog error".
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from kiln.health import checks, clock, node
from kiln.health.expect import expectations
from slurm_doubles import calls, install_doubles, updates
from slurm_doubles import node as slurm_node

ROOT = Path(__file__).resolve().parents[2]
NO_DBUS = sorted((ROOT / "tests" / "fixtures" / "real" / "timedatectl").glob("*_stderr.txt"))
PROLOG = ROOT / "playbooks" / "roles" / "health" / "templates" / "kiln-health-prolog.j2"
MISSING = "/kiln-no-such-mount"
MOUNT_DRAIN = f"kiln:health:mount: mount {MISSING} missing"


def tool(bin_dir: Path, name: str, body: str) -> None:
    (bin_dir / name).write_text("#!/bin/sh\n" + body)
    (bin_dir / name).chmod(0o755)


@pytest.fixture
def cpu_node(tmp_path, monkeypatch):
    """A CPU node running a job (ALLOCATED, no reason), every tool answering healthy."""
    bin_dir, state = tmp_path / "bin", tmp_path / "slurm"
    install_doubles(state, bin_dir, {"cpu001": {"state": "ALLOCATED", "reason": ""}})
    tool(bin_dir, "systemctl", "echo active\n")
    tool(bin_dir, "timedatectl", "echo yes\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("KILN_FAKE_SLURM", str(state))
    return tmp_path, bin_dir, state


def expect_for(tmp_path: Path, **health) -> dict:
    expect = expectations("cpu001", "none", 0, [], None, health)
    expect["node"]["disks"] = {str(tmp_path): 1}
    return expect


def run_main(tmp_path: Path, expect: dict, *args: str, capsys) -> tuple[int, str]:
    (tmp_path / "health.json").write_text(json.dumps(expect))
    argv = ["--expect", str(tmp_path / "health.json"), "--state-dir", str(tmp_path / "state")]
    code = node.main([*argv, *args])
    return code, capsys.readouterr().out


def time_sync(document: dict) -> dict:
    (finding,) = [f for f in document["findings"] if f["check"] == "time_sync"]
    return finding


# --- time_sync: timedatectl without D-Bus ----------------------------------------------------


@pytest.mark.parametrize("capture", NO_DBUS, ids=lambda p: p.stem)
def test_timedatectl_without_dbus_reads_the_kernel_clock_instead(cpu_node, capture):
    tmp_path, bin_dir, _ = cpu_node
    tool(bin_dir, "timedatectl", f"cat {capture} >&2\nexit 1\n")
    document = node.check(expect_for(tmp_path), tmp_path / "state", report=True)
    finding = time_sync(document)
    kernel = clock.read_kernel_clock()  # the same kernel the probe just read
    assert finding["ok"] is (kernel.maxerror_us < checks.MAXERROR_SYNCED_US)
    assert "kernel max error" in finding["reading"]
    assert "Failed to" not in finding["reading"]  # timedatectl's bus error is not the reading


def test_a_time_sync_probe_that_can_read_no_clock_could_not_check_and_drains_nothing(
    cpu_node, monkeypatch, capsys
):
    tmp_path, bin_dir, state = cpu_node
    tool(bin_dir, "timedatectl", f"cat {NO_DBUS[0]} >&2\nexit 1\n")

    def no_adjtimex():
        raise OSError("adjtimex not available: undefined symbol: adjtimex")

    monkeypatch.setattr(clock, "read_kernel_clock", no_adjtimex)
    code, out = run_main(tmp_path, expect_for(tmp_path), "--json", capsys=capsys)
    document = json.loads(out)
    assert code == 0 and document["ok"] is True  # could not check is not unhealthy
    assert time_sync(document) == {
        "check": "time_sync",
        "ok": None,
        "reading": "probe time_sync could not check: timedatectl exit 1: Failed to connect to "
        "bus: No such file or directory; adjtimex not available: undefined symbol: adjtimex",
    }
    assert updates(state) == [] and document["action"]["verb"] == "none"
    code, out = run_main(tmp_path, expect_for(tmp_path), capsys=capsys)
    assert "NOT CHECKED time_sync: probe time_sync could not check: timedatectl exit 1" in out
    assert out.rstrip().endswith("healthy: 4 checks pass, 1 could not check")


def test_timedatectl_saying_no_is_a_failed_reading_that_drains(cpu_node, capsys):
    tmp_path, bin_dir, state = cpu_node
    tool(bin_dir, "timedatectl", "echo no\n")
    code, out = run_main(tmp_path, expect_for(tmp_path), "--json", capsys=capsys)
    assert code == 1 and time_sync(json.loads(out))["ok"] is False
    reason = "kiln:health:time_sync: clock not synchronised (NTPSynchronized=no)"
    assert slurm_node(state, "cpu001")["reason"] == reason


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="adjtimex(2) is Linux's")
def test_the_kernel_clock_reads_without_privilege_or_dbus():
    kernel = clock.read_kernel_clock()
    assert 0 <= kernel.state <= 5  # TIME_OK .. TIME_ERROR
    assert kernel.maxerror_us >= 0 and kernel.esterror_us >= 0
    (finding,) = checks.kernel_time_findings(kernel.maxerror_us, kernel.status)
    assert finding.ok is (kernel.maxerror_us < 16_000_000)


# --- the Prolog drains with kiln's reason ------------------------------------------------------


def test_a_failing_prolog_drains_the_node_naming_the_check_before_it_exits_1(cpu_node, capsys):
    tmp_path, _, state = cpu_node
    expect = expect_for(tmp_path, mounts=[MISSING])
    code, out = run_main(tmp_path, expect, "--subset", "prolog", "--json", capsys=capsys)
    document = json.loads(out)
    assert code == 1 and document["action"]["verb"] == "drain"
    assert {f["check"] for f in document["findings"]} == {"mount", "disk"}  # no GPU: no gpu_count
    assert updates(state) == [["update", "nodename=cpu001", "state=drain", f"reason={MOUNT_DRAIN}"]]
    assert slurm_node(state, "cpu001")["reason"] == MOUNT_DRAIN
    # the Prolog moves no window and writes no periodic result
    assert not (tmp_path / "state" / "state.json").exists()
    assert not (tmp_path / "state" / "last.json").exists()


def test_a_passing_prolog_asks_the_controller_nothing(cpu_node, capsys):
    tmp_path, _, state = cpu_node
    code, _ = run_main(tmp_path, expect_for(tmp_path), "--subset", "prolog", capsys=capsys)
    assert code == 0 and not (state / "calls.log").exists()


def test_a_failing_prolog_keeps_anyone_elses_reason_and_never_resumes(cpu_node, capsys):
    tmp_path, _, state = cpu_node
    operator = {"state": "MIXED+DRAIN", "reason": "kiln:operator:alice: disk swap"}
    (state / "cpu001").write_text(json.dumps(operator))
    expect = expect_for(tmp_path, mounts=[MISSING], auto_resume=True)
    code, _ = run_main(tmp_path, expect, "--subset", "prolog", capsys=capsys)
    assert code == 1 and updates(state) == []
    assert slurm_node(state, "cpu001") == operator
    # a passing Prolog on a node with a health drain lifts nothing, even with auto_resume on
    (state / "cpu001").write_text(json.dumps({"state": "IDLE+DRAIN", "reason": MOUNT_DRAIN}))
    code, _ = run_main(tmp_path, expect_for(tmp_path, auto_resume=True), "--subset", "prolog",
                       capsys=capsys)  # fmt: skip
    assert code == 0 and updates(state) == []


def test_a_failing_prolog_with_the_controller_down_still_exits_1(cpu_node, capsys):
    tmp_path, _, state = cpu_node
    (state / "down").touch()
    expect = expect_for(tmp_path, mounts=[MISSING])
    code, out = run_main(tmp_path, expect, "--subset", "prolog", "--json", capsys=capsys)
    assert code == 1  # Slurm drains it then, with its own "Prolog error"
    assert "Unable to contact slurm controller" in json.loads(out)["action"]["why"]
    assert [c[0] for c in calls(state)] == ["show"]


def test_report_mode_never_calls_scontrol_even_when_failing(cpu_node, capsys):
    tmp_path, _, state = cpu_node
    expect = expect_for(tmp_path, mounts=[MISSING])
    for subset in ("all", "prolog"):
        code, _ = run_main(tmp_path, expect, "--subset", subset, "--report", capsys=capsys)
        assert code == 1
    assert not (state / "calls.log").exists()


def test_slurms_prolog_runs_the_subset_that_drains_not_the_report():
    text = PROLOG.read_text()
    (command,) = [line for line in text.splitlines() if line.startswith("exec ")]
    assert "kiln-health --subset prolog" in command and "--report" not in command
