"""Rolling changes through real ansible-playbook over local hosts: the nccl stage's playbook and
role, with slurm_maintenance's rolling step.

The stage playbook (playbooks/nccl.yml) and the roles nccl, nvidia_repo (whose hold-apt-mark
entry point holds NCCL) and slurm_maintenance are copied as they are, except the one task file
that calls the package manager (roles/nccl/tasks/install.yml), which becomes a call to a
stand-in. The host runs Debian, so the roles take the apt family's names and dpkg holds. The
controller's Slurm and each node's dpkg are stand-ins on PATH (tests/slurm_doubles.py)
replaying recorded real Slurm output; each host's modules run through a small interpreter
wrapper that names the host, so each keeps its own package state.
The stand-in all_reduce_perf prints a recorded real single-node run (8x H100,
tests/fixtures/real/nccl-tests-all_reduce_perf).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_doubles import APT_HELD, calls, install_doubles, node, packages, updates

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
RUN_ID = "20261201T090000Z-0c0c0c"
OLD, NEW = "2.21.5-1+cuda12.4", "2.23.4-1+cuda12.4"
OURS = f"kiln:maintenance:{RUN_ID}: nccl 2.21.5 -> 2.23.4"
BURNIN = "kiln:burnin:20261129T080000Z-aa11bb: gemm gpu3 612 TFLOPS < floor 700"
NCCL = ("libnccl2", "libnccl-dev")
REAL_RUN = (
    ROOT
    / "tests/fixtures/real/nccl-tests-all_reduce_perf/h100_80gb_8gpu_single_node_nvls_issue290.txt"
)
STAND_IN_INSTALL = """\
---
# Stand-in for apt (tests/unit/test_rolling_changes.py): the same packages and versions.
- name: Install NCCL {{ __nccl_package_version }}
  ansible.builtin.command:
    argv: >-
      {{ ['fake-apt-install']
         + (nccl_packages | map('regex_replace', '$', '=' ~ __nccl_package_version) | list) }}
  changed_when: true
"""


def held(version: str) -> dict:
    return {name: {"version": version, "selection": "hold"} for name in NCCL}


def setup(tmp_path: Path, slurm: dict, dpkg: dict, *, check_output: str | None = None):
    """The copied stage, the stand-ins and an inventory of `slurm`'s nodes; `dpkg`: each
    node's packages before the run. Returns (argv, env, state)."""
    if not (Path(sys.executable).parent / "ansible-playbook").exists():
        pytest.skip("ansible-playbook is not installed beside python")
    state, bin_dir, stage = tmp_path / "state", tmp_path / "bin", tmp_path / "stage"
    install_doubles(state, bin_dir, slurm)
    for host, installed in dpkg.items():
        (state / f"dpkg-{host}.json").write_text(json.dumps(installed))
    stage.mkdir()
    shutil.copy(PLAYBOOKS / "nccl.yml", stage / "nccl.yml")
    for role in ("nccl", "nvidia_repo", "slurm_maintenance"):  # nvidia_repo: the holds
        shutil.copytree(PLAYBOOKS / "roles" / role, stage / "roles" / role)
    (stage / "roles/nccl/tasks/install.yml").write_text(STAND_IN_INSTALL)
    tests_root = tmp_path / "nccl-tests"
    if check_output is not None:
        build = tests_root / "current" / "build"
        build.mkdir(parents=True)
        (tmp_path / "all_reduce_perf.out").write_text(check_output)
        binary = build / "all_reduce_perf"
        binary.write_text(
            f'#!/bin/sh\necho "$@" >> {tmp_path / "all_reduce_perf.args"}\n'
            f"cat {tmp_path / 'all_reduce_perf.out'}\n"
        )
        binary.chmod(0o755)
    hosts = {}
    for host in ["ctl", *slurm]:
        wrapper = bin_dir / f"python-{host}"  # each host's modules see their own dpkg
        wrapper.write_text(f'#!/bin/sh\nKILN_FAKE_HOST={host} exec {sys.executable} "$@"\n')
        wrapper.chmod(0o755)
        hosts[host] = {"ansible_python_interpreter": str(wrapper)}
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_become": False,
                "kiln_gpu_count": 8,
                "kiln_versions": {"nccl": "2.23.4", "cuda": "12.4"},
                "nccl_tests_root": str(tests_root),
                "nccl_tests_build": False,  # the build is molecule/nvidia's; here a stand-in
                "nccl_drain_timeout_s": 5,
                "slurm_maintenance_poll_s": 1,
            },
            "children": {
                "kiln_controllers": {"hosts": {"ctl": hosts["ctl"]}},
                "kiln_compute": {"hosts": {h: hosts[h] for h in slurm}},
            },
        }
    }
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i", str(tmp_path / "hosts.yml"), str(stage / "nccl.yml"),
        "-f", "10", "-e", f"kiln_run_id={RUN_ID}",
    ]  # fmt: skip
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT / "cli"),
        "KILN_FAKE_SLURM": str(state),
        "ANSIBLE_FILTER_PLUGINS": str(PLAYBOOKS / "filter_plugins"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
    }
    return argv, env, state


def run(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


def steps(state: Path, host: str) -> list[str]:
    """What happened to `host`, in order: drain/resume in Slurm, holds, the install."""
    seen = []
    for args in calls(state):
        if args[0] == "update" and args[1] == f"nodename={host}":
            seen.append(args[2])
        elif args[0] == host and args[1] == "dpkg" and args[2] == "--set-selections":
            seen.append("selections")
        elif args[0] == host and args[1] == "fake-apt-install":
            seen.append("install " + " ".join(args[2:]))
    return seen


def test_an_nccl_version_change_drains_lifts_the_holds_checks_and_resumes_only_its_drain(
    tmp_path,
):
    slurm = {
        "n01": {"state": "IDLE"},  # NCCL 2.21.5, in service: the rolling change
        "n02": {"state": "IDLE"},  # no NCCL yet: a first install, no drain
        "n03": {"state": "IDLE"},  # already 2.23.4: nothing to do
        "n04": {"state": "IDLE+DRAIN", "reason": BURNIN},  # 2.21.5, failed a burn-in
    }
    dpkg = {"n01": held(OLD), "n02": {}, "n03": held(NEW), "n04": held(OLD)}
    argv, env, state = setup(tmp_path, slurm, dpkg, check_output=REAL_RUN.read_text())
    done = run(argv, env)
    out = done.stdout
    assert done.returncode == 0, out[-5000:]

    install = f"install libnccl2={NEW} libnccl-dev={NEW}"
    # n01: drained with the change named, holds lifted, installed, held again, checked, resumed.
    assert steps(state, "n01") == [
        "state=drain", "selections", "selections", install, "selections", "selections",
        "state=resume",
    ]  # fmt: skip
    assert [u for u in updates(state) if u[1] == "nodename=n01"][0][3] == f"reason={OURS}"
    assert node(state, "n01") == {"state": "IDLE", "reason": ""}
    assert packages(state, "n01") == held(NEW)
    # The check ran the built all_reduce_perf over the node's 8 GPUs.
    assert "-g 8 -c 1" in (tmp_path / "all_reduce_perf.args").read_text()
    # n02: a first install: never drained, installed and held.
    assert steps(state, "n02") == [install, "selections", "selections"]
    assert packages(state, "n02") == held(NEW)
    # n03: already at the version: never drained; apt is asked and finds nothing to do.
    assert steps(state, "n03") == [install] and packages(state, "n03") == held(NEW)
    # n04: drained by a failed burn-in: changed (no job can run there) but keeps that drain.
    assert node(state, "n04") == slurm["n04"]
    assert not any(u[1] == "nodename=n04" for u in updates(state))
    assert packages(state, "n04") == held(NEW)
    assert f"n04 left alone: already IDLE+DRAIN ({BURNIN})" in out
    assert f"n04 not resumed: it was already IDLE+DRAIN ({BURNIN}) before this run" in out


def test_a_failed_check_keeps_the_node_drained_and_stops_the_rollout(tmp_path):
    """Batches of one (kiln_batch_size 1, kiln_max_fail_percentage 0): n01's all_reduce_perf
    reports wrong values, so n01 fails, stays drained with the change's reason and held at the
    new version, and n02 (the next batch) is never drained or changed."""
    slurm = {"n01": {"state": "IDLE"}, "n02": {"state": "IDLE"}}
    failing = REAL_RUN.read_text().replace(  # derived: the same run with 4 values out of bounds
        "# Out of bounds values : 0 OK", "# Out of bounds values : 4 FAILED"
    )
    argv, env, state = setup(tmp_path, slurm, {"n01": held(OLD), "n02": held(OLD)},
                             check_output=failing)  # fmt: skip
    done = run([*argv, "-e", "kiln_batch_size=1", "-e", "kiln_max_fail_percentage=0"], env)
    out = done.stdout
    assert done.returncode != 0, out[-5000:]
    assert (
        f"n01: the check after nccl 2.21.5 -> 2.23.4 failed, left drained ({OURS}): "
        "all_reduce_perf -g 8 after the NCCL change: 4 out-of-bounds value(s)"
    ) in out
    assert node(state, "n01") == {"state": "IDLE+DRAIN", "reason": OURS}
    assert packages(state, "n01") == held(NEW)
    assert steps(state, "n02") == [] and packages(state, "n02") == held(OLD)
    assert node(state, "n02") == {"state": "IDLE"}


def test_without_lifting_the_holds_the_change_would_fail_as_apt_does(tmp_path):
    """The stand-in refuses a held package as apt does; the rolling step lifts the holds first
    (the test above), while a plain install of a held package fails with apt's words: the
    stand-in is strict where it matters."""
    argv, env, state = setup(tmp_path, {"n01": {"state": "IDLE"}}, {"n01": held(OLD)})
    stand_in = Path(env["PATH"].split(":", 1)[0]) / "fake-apt-install"
    proc = subprocess.run(
        [str(stand_in), f"libnccl2={NEW}"], capture_output=True, text=True, check=False,
        env={**env, "KILN_FAKE_HOST": "n01"},
    )  # fmt: skip
    assert proc.returncode == 100 and APT_HELD in proc.stderr


def test_a_dry_run_drains_nothing_changes_nothing_and_does_not_wait(tmp_path):
    """`kiln provision --check` runs the stage in check mode: the node that would roll is
    neither drained nor changed, its holds stay, and the job wait is not entered (a squeue that
    reports a job would otherwise hold the run for the whole wait and fail the node)."""
    argv, env, state = setup(tmp_path, {"n01": {"state": "IDLE"}}, {"n01": held(OLD)})
    busy = Path(env["PATH"].split(":", 1)[0]) / "squeue"
    busy.write_text(  # a job runs on the node
        f"#!/bin/sh\necho '[\"squeue\"]' >> {state / 'calls.log'}\necho 4242\n"
    )
    done = run([*argv, "--check"], env)
    assert done.returncode == 0, done.stdout[-5000:]
    assert updates(state) == []
    assert steps(state, "n01") == [] and packages(state, "n01") == held(OLD)
    assert not any(args[0] == "squeue" for args in calls(state) if args)
    # No "not resumed: its drain was changed" line: a dry run placed no drain to change.
    assert "not resumed" not in done.stdout
