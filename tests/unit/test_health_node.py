"""The real node program (python3 -m kiln.health.node), run from a copy of ONLY the files the
health role ships (kiln.health.expect.NODE_FILES), with stand-in tools on PATH that replay
recorded real outputs (nvidia-smi, ibstat, perfquery, kernel Xid lines) and the Slurm double of
tests/slurm_doubles.py (Slurm 22.05's scontrol answers and error texts)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from captures import shared_capture
from kiln.health.expect import NODE_FILES, expectations
from slurm_doubles import install_doubles, node, updates

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real"
KILN = ROOT / "cli" / "kiln"
# The node's python3 (stdlib only, no kiln installed), as the wrapper runs it.
NODE_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
HEALTH_DRAIN = "kiln:health:xid: Xid 94 on PCI 0000:00:08: pid='<unknown>', name=<unknown>"


def tool(bin_dir: Path, name: str, body: str) -> None:
    (bin_dir / name).write_text("#!/bin/sh\n" + body)
    (bin_dir / name).chmod(0o755)


@pytest.fixture
def node_env(tmp_path):
    lib = tmp_path / "lib"
    for name in NODE_FILES:  # exactly what the role copies
        (lib / "kiln" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(KILN / name, lib / "kiln" / name)
    bin_dir, state = tmp_path / "bin", tmp_path / "slurm"
    install_doubles(state, bin_dir, {"gpu001": {"state": "IDLE", "reason": ""}})
    csv = shared_capture("nvidia-smi-query-gpu-csv/h100_80gb_hbm3_allfields_idle.csv")
    nvlink = REAL / "nvidia-smi-nvlink" / "v100_sxm2_7gpu_inactive_links_azhpc.txt"
    tool(
        bin_dir,
        "nvidia-smi",
        f'[ "$1" = nvlink ] && exec cat {nvlink}\n'
        f"[ -e {tmp_path}/hang ] && exec sleep 30\nexec cat {csv}\n",
    )
    tool(
        bin_dir, "ibstat", f"exec cat {shared_capture('ibstat/h100_cx7_some_eth_ports_down.txt')}\n"
    )
    perf = REAL / "perfquery" / "edr_hca_o0001_port1_extended.txt"
    tool(bin_dir, "perfquery", f"exec cat {perf}\n")
    tool(bin_dir, "journalctl", f"exec cat {tmp_path}/kernel.log\n")
    tool(bin_dir, "systemctl", "echo active\n")
    tool(bin_dir, "timedatectl", "echo yes\n")
    (tmp_path / "kernel.log").write_text(
        (REAL / "kernel-xid" / "gpud_dmesg_ctime_xid_13_109_user_app.txt").read_text()
    )
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PYTHONPATH": str(lib),
        "KILN_FAKE_SLURM": str(state),
    }
    return tmp_path, env, state


def check(tmp_path, env, *args, **health) -> tuple[int, dict, float]:
    expect = expectations(
        "gpu001", "h100-sxm", 1, ["mlx5_0", "mlx5_3"], None, {"skip": [], **health}
    )
    expect["node"]["disks"] = {str(tmp_path): 1}
    (tmp_path / "health.json").write_text(json.dumps(expect))
    started = time.monotonic()
    done = subprocess.run(
        [
            NODE_PYTHON,
            "-m",
            "kiln.health.node",
            "--expect",
            str(tmp_path / "health.json"),
            "--state-dir",
            str(tmp_path / "state"),
            "--json",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    elapsed = time.monotonic() - started
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout), elapsed


def test_a_healthy_node_passes_every_probe_and_slurm_is_left_alone(node_env):
    tmp_path, env, state = node_env
    rc, result, elapsed = check(tmp_path, env)
    assert rc == 0, result["findings"]
    assert {f["check"] for f in result["findings"]} >= {
        "gpu_count",
        "nvlink",
        "xid",
        "ib_port",
        "ib_errors",
        "mount",
        "disk",
        "slurmd",
    }
    assert updates(state) == [] and result["action"]["verb"] == "none"
    assert json.loads((tmp_path / "state" / "last.json").read_text())["ok"] is True
    assert elapsed < 3, f"the whole check took {elapsed:.2f} s"


def test_a_drain_xid_drains_the_node_naming_the_probe_and_never_an_operator_drain(node_env):
    tmp_path, env, state = node_env
    (tmp_path / "kernel.log").write_text(
        (REAL / "kernel-xid" / "akash_node4_dmesg_T_grep_NVRM_xid_43_31_94.txt").read_text()
    )
    rc, result, _ = check(tmp_path, env)
    assert rc == 1 and result["action"]["verb"] == "drain"
    assert node(state, "gpu001")["reason"].startswith(HEALTH_DRAIN)
    (state / "gpu001").write_text(
        json.dumps({"state": "IDLE+DRAIN", "reason": "kiln:operator:alice: disk swap"})
    )
    before = len(updates(state))
    check(tmp_path, env, auto_resume=True)
    (tmp_path / "kernel.log").write_text("")
    check(tmp_path, env, auto_resume=True)  # healthy now, but the drain is alice's
    assert len(updates(state)) == before
    assert node(state, "gpu001")["reason"] == "kiln:operator:alice: disk swap"


def test_a_health_drain_is_lifted_only_with_auto_resume(node_env):
    tmp_path, env, state = node_env
    drain = "kiln:health:gpu_count: probe gpu: nvidia-smi --query-gpu=index timed out after 10 s"
    (state / "gpu001").write_text(json.dumps({"state": "IDLE+DRAIN", "reason": drain}))
    assert check(tmp_path, env)[1]["action"]["verb"] == "none"
    assert node(state, "gpu001")["state"] == "IDLE+DRAIN"
    assert check(tmp_path, env, auto_resume=True)[1]["action"]["verb"] == "resume"
    assert node(state, "gpu001") == {"state": "IDLE", "reason": ""}


def test_an_xid_drain_outlives_the_quiet_checks_after_it_even_with_auto_resume(node_env):
    """Issue 27: the Xid probe reads only kernel lines since the last check, so the check after
    an Xid drain sees none; that is no proof the GPU is good, and the drain stays."""
    tmp_path, env, state = node_env
    (tmp_path / "kernel.log").write_text(
        (REAL / "kernel-xid" / "akash_node4_dmesg_T_grep_NVRM_xid_43_31_94.txt").read_text()
    )
    rc, result, _ = check(tmp_path, env, auto_resume=True)
    assert rc == 1 and result["action"]["verb"] == "drain"
    (tmp_path / "kernel.log").write_text("")  # the next windows hold no new Xid
    for _ in range(2):
        rc, result, _ = check(tmp_path, env, auto_resume=True)
        assert rc == 0 and result["action"]["verb"] == "none"
        assert "until an operator or a passing burn-in" in result["action"]["why"]
    assert node(state, "gpu001")["reason"].startswith(HEALTH_DRAIN)
    assert len(updates(state)) == 1  # the drain, nothing after it


def test_a_hung_nvidia_smi_is_a_failed_check_naming_the_probe_within_its_timeout(node_env):
    tmp_path, env, state = node_env
    (tmp_path / "hang").touch()
    rc, result, elapsed = check(tmp_path, env, probe_timeout_s=1.0)
    failing = [f for f in result["findings"] if not f["ok"]]
    assert [f["check"] for f in failing] == ["gpu_count"]
    assert failing[0]["reading"].startswith("probe gpu: nvidia-smi --query-gpu=index,name,")
    assert failing[0]["reading"].endswith(" timed out after 1 s")
    assert rc == 1 and elapsed < 5
    assert node(state, "gpu001")["reason"].startswith("kiln:health:gpu_count: probe gpu:")


def test_report_mode_never_calls_scontrol_and_the_prolog_drains_naming_the_check(node_env):
    tmp_path, env, state = node_env
    rc, result, _ = check(tmp_path, env, "--report", mounts=["/kiln-no-such-mount"])
    assert rc == 1 and not (state / "calls.log").exists()  # scontrol not even asked
    rc, result, _ = check(tmp_path, env, "--subset", "prolog", mounts=["/kiln-no-such-mount"])
    assert rc == 1 and {f["check"] for f in result["findings"]} == {"gpu_count", "mount", "disk"}
    # Issue 27: kiln's reason, placed before Slurm's own "Prolog error" (a no-op on a drained node)
    assert node(state, "gpu001")["reason"] == "kiln:health:mount: mount /kiln-no-such-mount missing"
    assert not (tmp_path / "state" / "state.json").exists()  # the Xid window is Slurm's run's


def test_slurm_unreachable_changes_nothing_and_still_reports(node_env):
    tmp_path, env, state = node_env
    (state / "down").touch()
    rc, result, _ = check(tmp_path, env, mounts=["/kiln-no-such-mount"])
    assert rc == 1 and "scontrol show node failed" in result["action"]["why"]
    assert "Unable to contact slurm controller" in result["action"]["why"]
    assert updates(state) == []
