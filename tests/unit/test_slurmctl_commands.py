"""Command building and quoting for the Slurm controller: a reason is one argv element.

The shell test runs the script kiln sends through a real /bin/sh with a stand-in `scontrol`
(a test double that prints its arguments, one per line) first on PATH.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from kiln.errors import ExitCode, InvalidInputError
from kiln.slurmctl import commands

NASTY = 'it\'s "bad"; rm -rf / $(id) `uname` && echo | cat > x'


def test_kiln_reason_prefix_and_user():
    assert commands.kiln_reason("  disk swap ", user="alice") == "kiln:operator:alice: disk swap"
    # a user name never brings shell or bracket syntax into the reason
    assert commands.kiln_reason("x", user="a b;c[d]") == "kiln:operator:a_b_c_d_: x"


@pytest.mark.parametrize(
    "text",
    ["", "   ", "line one\nline two", "tab\there", "bell\x07", "esc\x1b[31mred", "x" * 101],
)
def test_reasons_slurm_cannot_keep_are_refused_with_exit_2(text):
    with pytest.raises(InvalidInputError) as caught:
        commands.kiln_reason(text, user="alice")
    assert caught.value.exit_code is ExitCode.INVALID_INPUT


def test_reason_at_the_limit_is_kept():
    text = "y" * commands.REASON_TEXT_MAX
    assert commands.kiln_reason(text, user="u") == f"kiln:operator:u: {text}"
    longest = commands.kiln_reason(text, user="u" * 40)  # the user is cut to 32, the text kept
    assert longest == f"kiln:operator:{'u' * 32}: {text}"


def test_drain_argv_keeps_the_reason_as_one_argument():
    reason = commands.kiln_reason(NASTY, user="alice")
    argv = commands.drain(["gpu003", "gpu001", "gpu002", "gpu010"], reason)
    assert argv == [
        "scontrol",
        "update",
        "nodename=gpu[001-003,010]",
        "state=drain",
        f"reason=kiln:operator:alice: {NASTY}",
    ]
    line = commands.script([argv])
    middle = line.split("; ", 1)[1].rsplit("; echo", 1)[0]
    assert shlex.split(middle) == argv


def test_nodelist_is_a_compressed_hostlist():
    assert commands.nodelist([f"gpu{i:03d}" for i in range(1, 129)]) == "gpu[001-128]"
    assert commands.resume(["kd-node01", "kd-node02"]) == [
        "scontrol", "update", "nodename=kd-node[01-02]", "state=resume",
    ]  # fmt: skip
    with pytest.raises(ValueError):
        commands.nodelist([])


def test_sinfo_and_show_node_argv():
    assert commands.sinfo() == ["sinfo", "--noheader", "--format", "%N|%T|%G|%u|%H|%E"]
    assert commands.sinfo(["a1", "a2"])[-2:] == ["--nodes", "a[1-2]"]
    assert commands.show_nodes(["gpu001"]) == ["scontrol", "show", "node", "gpu001"]
    assert commands.show_nodes(["n01", "n02"]) == ["scontrol", "show", "node", "n[01-02]"]


def test_burnin_reservation_and_job_commands():
    assert commands.create_reservation("res", ["n01", "n02"], 50) == [
        "scontrol", "create", "reservation", "reservationname=res", "starttime=now",
        "duration=50", "users=root", "flags=maint,ignore_jobs", "nodes=n[01-02]",
    ]  # fmt: skip
    assert commands.delete_reservation("res") == ["scontrol", "delete", "reservationname=res"]
    assert commands.drain(["n01"], "kiln: gemm cpu0 0.1 TFLOPS < floor 1") == [
        "scontrol", "update", "nodename=n01", "state=drain",
        "reason=kiln: gemm cpu0 0.1 TFLOPS < floor 1",
    ]  # fmt: skip
    assert commands.squeue(["4", "5"]) == [
        "squeue", "--noheader", "--array", "--jobs=4,5", "--format=%i|%T|%r",
    ]  # fmt: skip
    assert commands.scancel(["4", "5"]) == ["scancel", "4", "5"]
    submit = commands.sbatch("#!/bin/bash\necho hi\n")
    assert (
        submit == "sbatch --parsable <<'KILN_BURNIN_JOB'\n#!/bin/bash\necho hi\nKILN_BURNIN_JOB\n"
    )
    assert commands.job_id("17\n") == "17" and commands.job_id("18;cluster\n") == "18"
    assert commands.job_id("sbatch: error: Batch job submission failed\n") is None


def test_script_runs_in_a_real_shell_without_interpreting_the_reason(tmp_path: Path):
    fake = tmp_path / "scontrol"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "argc=$#" "$@"\n')
    fake.chmod(0o755)
    reason = commands.kiln_reason(NASTY, user="alice")
    steps = [commands.drain(["gpu001"], reason), ["sh", "-c", "exit 3"]]
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    proc = subprocess.run(
        ["sh", "-c", commands.script(steps)],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=True,
    )  # fmt: skip
    (code, out), (code2, out2) = commands.split_steps(proc.stdout, 2)
    assert code == 0 and code2 == 3 and out2 == ""
    assert out.splitlines() == [
        "argc=4", "update", "nodename=gpu001", "state=drain",
        f"reason=kiln:operator:alice: {NASTY}",
    ]  # fmt: skip
    assert not (tmp_path / "x").exists()  # the `> x` inside the reason was never a redirect


def test_split_steps_marks_steps_that_never_ran():
    text = "@@kiln-step 0\nhello\nworld\n@@kiln-step-rc 0\n"
    assert commands.split_steps(text, 2) == [(0, "hello\nworld"), (None, "")]
