"""nccl-tests as the GPU all-reduce: the launcher's choice and commands (workloads/
allreduce_launch.py, stdlib only, run here against a stand-in `srun`), and real all_reduce_perf
outputs turned into the all-reduce result document (kiln.burnin.nccl_tests)."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from captures import shared_capture
from kiln.burnin.nccl_tests import complete, complete_text
from kiln.burnin.workloads import workload_path
from kiln.judging.results import allreduce_from_doc
from kiln.parsers import ParseError
from kiln.records.documents import RunDocuments
from node_fetch import collect_here

FIXTURES = Path(__file__).parents[1] / "fixtures"
REAL = FIXTURES / "real" / "nccl-tests-all_reduce_perf"
SUPERBENCH = shared_capture(
    "nccl-tests-all_reduce_perf/a100_sxm4_40gb_8gpu_single_node_superbench.txt"
)
H100_2NODE = REAL / "h100_80gb_hbm3_2node_16gpu_gcp_a3mega.txt"
OCI_2NODE = REAL / "a100_sxm4_40gb_2node_16gpu_oci_roce.txt"
WRONG = FIXTURES / "derived" / "nccl-tests-all_reduce_perf" / "h100_2node_16gpu_wrong_values.txt"
TORCH_DOC = {
    "schema_version": 1,
    "kind": "allreduce",
    "implementation": "torch",
    "hostname": "gpu01",
    "hosts": ["gpu01", "gpu01"],
    "world_size": 2,
    "backend": "nccl",
    "nccl_algo": None,
    "rows": [{"bytes": 1024, "count": 256, "time_us": 9.0, "algbw_gbs": 0.1, "busbw_gbs": 0.1}],
    "verdict_bytes": 1024,
    "verdict_busbw_gbs": 0.1,
    "correct": True,
    "wrong": 0,
}


def launcher():
    spec = importlib.util.spec_from_file_location("kiln_launch", workload_path("allreduce_launch"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def launch_doc(text: str, **extra) -> dict:
    """The document the launcher prints after an all_reduce_perf run that printed `text`."""
    return {
        "schema_version": 1,
        "kind": "allreduce",
        "implementation": "nccl-tests",
        "hostname": "n1",
        "returncode": 0,
        "nccl_algo": "Ring",
        "output": text,
        **extra,
    }


# --- which implementation runs, and how it is started ---------------------------------------


@pytest.mark.parametrize(
    ("argv", "built", "expected"),
    [
        (["--backend", "nccl"], True, ("nccl-tests", None)),
        (["--backend", "nccl"], False, ("torch", "nccl-tests not built at {path}")),
        (["--backend", "gloo"], True, ("torch", None)),  # CPU-only nodes: always torch
        (["--backend", "nccl", "--implementation", "torch"], True, ("torch", None)),
    ],
)
def test_nccl_tests_runs_on_gpu_jobs_where_it_is_built(tmp_path, argv, built, expected):
    mod = launcher()
    binary = tmp_path / "all_reduce_perf"
    if built:
        executable(binary, "#!/bin/sh\n")
    args = mod.arguments([*argv, "--nccl-tests", str(binary)])
    implementation, why = expected
    assert mod.choose(args, {}) == (implementation, why and why.format(path=binary))


def test_the_burnin_role_can_point_the_launcher_at_its_build(tmp_path):
    mod = launcher()
    binary = executable(tmp_path / "all_reduce_perf", "#!/bin/sh\n")
    args = mod.arguments(["--backend", "nccl"])
    assert mod.choose(args, {mod.NCCL_TESTS_ENV: str(binary)}) == ("nccl-tests", None)
    assert mod.NCCL_TESTS == "/opt/kiln/nccl-tests/current/build/all_reduce_perf"
    args = mod.arguments(["--backend", "nccl", "--implementation", "nccl-tests"])
    with pytest.raises(SystemExit, match="not built"):
        mod.choose(args, {mod.NCCL_TESTS_ENV: str(tmp_path / "missing")})


def test_launch_commands():
    mod = launcher()
    args = mod.arguments(
        ["--ntasks-per-node", "8", "--backend", "nccl", "--iters", "50", "--timeout", "1800"]
    )
    assert mod.nccl_tests_command(args, {}) == [
        *("srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--ntasks-per-node=8"),
        "/opt/kiln/nccl-tests/current/build/all_reduce_perf",
        *("-b", "1048576", "-e", "1073741824", "-f", "2", "-g", "1", "-w", "5", "-n", "50"),
        *("-c", "1", "-d", "float", "-o", "sum"),
    ]
    workload = str(workload_path("allreduce"))
    assert mod.torch_command(args, "/venv/bin/python3") == [
        *("srun", "--kill-on-bad-exit=1", "--ntasks-per-node=8", "/venv/bin/python3", workload),
        *("--iters", "50", "--warmup", "5", "--timeout", "1800", "--backend", "nccl"),
    ]
    cpu = mod.arguments(["--backend", "gloo", "--ring", "--max-bytes", "4096"])
    assert mod.torch_command(cpu, "py") == [
        *("srun", "--kill-on-bad-exit=1", "--ntasks-per-node=1", "py", workload),
        *("--iters", "20", "--warmup", "5", "--timeout", "600", "--backend", "gloo"),
        *("--max-bytes", "4096", "--ring"),
    ]


# --- the launcher end to end, with a stand-in srun ------------------------------------------

FAKE_SRUN = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_LOG"
printf 'NCCL_ALGO=%s\\n' "${NCCL_ALGO:-}" >> "$FAKE_LOG"
case "$*" in
  *--mpi=pmix*)
    case "$FAKE_MODE" in
      nopmix) echo "srun: error: MPI plugin's pmix not found" >&2; exit 1 ;;
      partial) head -n 25 "$FAKE_OUTPUT"; echo "Test NCCL failure common.cu:1"; exit 1 ;;
      *) cat "$FAKE_OUTPUT"; exit "${FAKE_RC:-0}" ;;
    esac ;;
  *)
    printf 'MASTER_PORT=%s\n' "${MASTER_PORT:-}" >> "$FAKE_LOG"
    tries=$(grep -c '^MASTER_PORT=' "$FAKE_LOG")
    case "$FAKE_TORCH_MODE:$tries" in
      connect-once:1|connect:*)
        echo "allreduce: the ranks could not connect (rank 3 of 32): connectFullMesh" >&2
        echo "srun: error: node04: task 3: Exited with exit code 75" >&2; exit 75 ;;
      crash:*) echo "RuntimeError: Connection closed by peer" >&2; exit 1 ;;
      *) cat "$FAKE_TORCH" ;;
    esac ;;
esac
"""


def run_launcher(
    tmp_path: Path, *argv: str, mode="ok", output=H100_2NODE, rc=0, built=True, torch="ok"
):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    executable(bindir / "srun", FAKE_SRUN)
    binary = tmp_path / "all_reduce_perf"
    if built:
        executable(binary, "#!/bin/sh\nexit 99\n")  # srun starts it; never run here
    torch_doc = tmp_path / "torch.json"
    torch_doc.write_text(json.dumps(TORCH_DOC))
    log = tmp_path / "srun.log"
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_LOG": str(log),
        "FAKE_MODE": mode,
        "FAKE_OUTPUT": str(output),
        "FAKE_RC": str(rc),
        "FAKE_TORCH": str(torch_doc),
        "FAKE_TORCH_MODE": torch,
    }
    env.pop("NCCL_ALGO", None)
    proc = subprocess.run(
        [sys.executable, str(workload_path("allreduce_launch")), "--nccl-tests", str(binary)]
        + list(argv),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return proc, calls


def test_gpu_job_runs_nccl_tests_over_pmix_and_kiln_reads_its_output(tmp_path):
    proc, calls = run_launcher(
        tmp_path, "--ntasks-per-node", "8", "--backend", "nccl", "--iters", "50", "--ring"
    )
    assert proc.returncode == 0, proc.stderr
    assert len(calls) == 2  # one srun: nccl-tests, no torch fallback
    assert calls[0].startswith("--mpi=pmix --kill-on-bad-exit=1 --ntasks-per-node=8 ")
    assert "all_reduce_perf -b 1048576 -e 1073741824 -f 2 -g 1 -w 5 -n 50 -c 1" in calls[0]
    assert calls[1] == "NCCL_ALGO=Ring"  # --ring reaches every rank through srun's environment
    raw = json.loads(proc.stdout)
    assert raw["implementation"] == "nccl-tests" and raw["output"] == H100_2NODE.read_text()
    assert raw["verdict_bytes"] == 1 << 30 and raw["ntasks_per_node"] == 8
    doc = json.loads(complete_text(proc.stdout))
    assert doc["implementation"] == "nccl-tests" and doc["wrong"] == 0 and doc["correct"]
    assert doc["hosts"][:1] == ["ztan-mig-235z"] and doc["world_size"] == 16
    assert doc["verdict_bytes"] == 1 << 30 and doc["verdict_busbw_gbs"] == 297.86
    result = allreduce_from_doc("fabric-ring", doc)  # helper A's reader: the same names
    assert result.implementation == "nccl-tests" and result.wrong == 0 and result.ring
    assert result.hosts == ("ztan-mig-235z", "ztan-mig-gq73") and result.scope == "pair"


def test_wrong_values_are_a_result_even_though_nccl_tests_exits_1(tmp_path):
    proc, _ = run_launcher(tmp_path, "--ntasks-per-node", "8", output=WRONG, rc=1)
    assert proc.returncode == 0, proc.stderr
    doc = complete(json.loads(proc.stdout))
    assert doc["returncode"] == 1
    assert doc["wrong"] == 24 and doc["out_of_bounds"] == 24 and doc["correct"] is False
    assert doc["verdict_bytes"] == 1 << 30  # the verdict size itself was right
    assert [r["bytes"] for r in doc["rows"] if r["wrong"]] == [8 << 30]


def test_nccl_tests_that_stops_part_way_leaves_no_result(tmp_path):
    proc, calls = run_launcher(tmp_path, "--ntasks-per-node", "8", mode="partial")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "Test NCCL failure" in proc.stderr  # into the job's log
    assert len(calls) == 2  # no torch run to hide it


def test_nccl_tests_that_cannot_start_falls_back_to_torch_saying_why(tmp_path):
    proc, calls = run_launcher(tmp_path, "--ntasks-per-node", "8", mode="nopmix")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["implementation"] == "torch" and doc["wrong"] == 0
    assert doc["fallback"].startswith("nccl-tests exited 1 before its table: ")
    assert "pmix not found" in doc["fallback"]
    assert "--mpi=pmix" in calls[0] and "--mpi=pmix" not in calls[2]
    assert calls[2].endswith("--backend nccl") and "allreduce.py" in calls[2]


def test_without_nccl_tests_the_gpu_job_runs_torch(tmp_path):
    proc, calls = run_launcher(tmp_path, "--ntasks-per-node", "8", built=False)
    doc = json.loads(proc.stdout)
    assert doc["implementation"] == "torch" and doc["fallback"].startswith("nccl-tests not built")
    assert len(calls) == 3 and "--mpi=pmix" not in calls[0]  # one srun: argv, two variables


def test_cpu_jobs_run_torch_with_gloo_and_no_fallback_note(tmp_path):
    proc, calls = run_launcher(tmp_path, "--backend", "gloo", "--ring")
    doc = json.loads(proc.stdout)
    assert doc == TORCH_DOC  # as allreduce.py printed it
    assert calls[0].startswith("--kill-on-bad-exit=1 --ntasks-per-node=1 ")
    assert calls[0].endswith("--backend gloo --ring")


def test_ranks_that_could_not_connect_are_started_once_more_on_a_free_port(tmp_path):
    """A 32-rank gloo ring failed its full-mesh connect in one run of two on the sandbox (make
    test-scale, 2026-12-04): a failure before the ranks connected is no measurement."""
    proc, calls = run_launcher(tmp_path, "--backend", "gloo", "--ring", torch="connect-once")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {**TORCH_DOC, "rendezvous_retries": 1}
    ports = [c.removeprefix("MASTER_PORT=") for c in calls if c.startswith("MASTER_PORT=")]
    assert ports[0] == "" and ports[1].isdigit() and len(ports) == 2  # the job's, then a free one
    assert "the ranks could not connect" in proc.stderr  # the first try is in the job's log


def test_ranks_that_never_connect_leave_no_result_after_the_second_try(tmp_path):
    proc, calls = run_launcher(tmp_path, "--backend", "gloo", "--ring", torch="connect")
    assert proc.returncode == 75 and proc.stdout == ""
    assert sum(c.startswith("MASTER_PORT=") for c in calls) == 2  # once more, not again


def test_a_failure_after_the_ranks_connected_is_not_retried(tmp_path):
    proc, calls = run_launcher(tmp_path, "--backend", "gloo", "--ring", torch="crash")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "Connection closed by peer" in proc.stderr
    assert sum(c.startswith("MASTER_PORT=") for c in calls) == 1


def test_the_workload_and_its_launcher_say_the_same_words():
    launcher = workload_path("allreduce_launch").read_text()
    workload = workload_path("allreduce").read_text()
    words = 'RENDEZVOUS_FAILED = "allreduce: the ranks could not connect"'
    assert words in launcher and words in workload


# --- real outputs -> the result document ----------------------------------------------------


def test_a_real_single_node_run_without_validation():
    doc = complete(launch_doc(SUPERBENCH.read_text(), verdict_bytes=None))
    assert doc["hosts"] == ["localhost"] * 8 and doc["world_size"] == 8
    assert doc["backend"] == "nccl" and doc["dtype"] == "float32"
    assert [r["bytes"] for r in doc["rows"]] == [4 << k for k in range(32)]  # no size-0 rows
    assert doc["verdict_bytes"] == 8 << 30 and doc["verdict_busbw_gbs"] == 235.26
    assert doc["rows"][-1] == {
        "bytes": 8589934592,
        "count": 2147483648,
        "time_us": 63896.0,
        "algbw_gbs": 134.44,
        "busbw_gbs": 235.26,
        "wrong": 0,
    }
    assert doc["wrong"] == 0 and doc["validated"] is False  # -c 0: #wrong printed N/A
    result = allreduce_from_doc("node-x", doc)
    assert result.scope == "node" and result.implementation == "nccl-tests"


@pytest.mark.parametrize(
    ("fixture", "hosts", "verdict", "busbw", "version"),
    [
        (H100_2NODE, ["ztan-mig-235z", "ztan-mig-gq73"], 8 << 30, 338.82, None),
        (OCI_2NODE, ["inst-li3ob-ao-ub24", "inst-wyzi7-ao-ub24"], 10 << 30, 191.76, None),
    ],
)
def test_real_two_node_runs(fixture, hosts, verdict, busbw, version):
    doc = complete(launch_doc(fixture.read_text(), verdict_bytes=None))
    assert sorted(set(doc["hosts"])) == hosts and doc["world_size"] == 16
    assert doc["hosts"] == [hosts[0]] * 8 + [hosts[1]] * 8  # rank order
    assert (doc["verdict_bytes"], doc["verdict_busbw_gbs"]) == (verdict, busbw)
    assert doc["wrong"] == 0 and doc["validated"] and doc["correct"]
    assert doc.get("nccl_version") == version
    assert allreduce_from_doc("fabric-ring", doc).scope == "pair"


def test_versions_are_kept_when_the_output_names_them():
    text = "NCCL version 2.14.3+cuda11.7\n" + OCI_2NODE.read_text()
    text = "# nccl-tests version 2.13.6 nccl-headers=21805 nccl-library=21805\n" + text
    doc = complete(launch_doc(text))
    assert doc["nccl_version"] == "2.14.3+cuda11.7" and doc["nccl_tests_version"] == "2.13.6"


def test_complete_leaves_torch_documents_and_garbage_alone():
    text = json.dumps(TORCH_DOC)
    assert complete_text(text) == text
    assert complete_text("not json") == "not json"
    assert complete_text("[1, 2]") == "[1, 2]"
    with pytest.raises(ParseError):
        complete(launch_doc("srun: error: something\n"))
    doc = json.loads(complete_text(json.dumps(launch_doc("srun: error: something\n"))))
    assert "rows" not in doc and doc["error"].startswith("nccl-tests output unreadable")


@pytest.mark.parametrize("library", [True, False], ids=["on-the-node", "on-the-controller"])
def test_collection_completes_the_document_it_stores(tmp_path, library):
    raw = json.dumps(launch_doc(OCI_2NODE.read_text()))
    collect_here(tmp_path, {"allreduce/fabric-ring.json": raw}, library=library)
    stored = json.loads(RunDocuments(tmp_path).text("allreduce/fabric-ring.json"))
    assert stored["implementation"] == "nccl-tests" and stored["verdict_busbw_gbs"] == 191.76
    assert stored["output"] == OCI_2NODE.read_text()  # the tool's own words stay in the record


def test_the_burnin_role_ships_every_workload_and_names_the_build():
    import yaml

    from kiln.burnin.workloads import WORKLOADS

    role = Path(__file__).parents[2] / "playbooks" / "roles" / "burnin"
    shipped = yaml.safe_load((role / "vars" / "main.yml").read_text())["__burnin_workloads"]
    assert sorted(shipped) == sorted(WORKLOADS)
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    assert defaults["burnin_nccl_tests"] == launcher().NCCL_TESTS
    assert "KILN_BURNIN_NCCL_TESTS=" in (role / "templates" / "kiln-burnin.j2").read_text()
