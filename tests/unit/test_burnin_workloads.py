"""The workloads shipped to nodes, run for real on this CPU (torch + gloo)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import socket
import subprocess
import sys

import pytest

from kiln.burnin.workloads import workload_path

pytestmark = pytest.mark.local
torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")

TIMEOUT = 600  # importing torch on a loaded 2-core CI machine can take a while


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"kiln_workload_{name}", workload_path(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("name", ["gemm", "allreduce", "allreduce_launch", "ibbw"])
def test_workloads_import_only_stdlib_and_torch(name):
    tree = ast.parse(workload_path(name).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(node.module.split(".")[0])
    assert "kiln" not in roots
    allowed = {"torch", "__future__"} if name in ("gemm", "allreduce") else {"__future__"}
    assert roots - allowed <= set(sys.stdlib_module_names)


def test_gemm_runs_on_cpu_and_reports_json():
    proc = subprocess.run(
        [sys.executable, str(workload_path("gemm")), "--seconds", "1", "--n", "256"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1 and doc["kind"] == "gemm"
    assert doc["device_kind"] == "cpu" and doc["n"] == 256 and doc["hostname"]
    [device] = doc["devices"]
    assert device["dtype"] == "float32" and device["checksum_ok"] is True
    assert device["tflops"] > 0 and device["iterations"] >= 1 and device["seconds"] >= 1.0
    # silent data corruption: every product bitwise the first, the FP64 references at least
    # at the first and the last batch
    assert device["bit_checks"] >= 1 and device["bit_mismatches"] == 0
    assert device["reference_ok"] is True and device["reference_checks"] >= 1
    assert len(device["digest"]) == 32 and "first_mismatch" not in device
    assert doc["seed"] == 20250
    assert doc["samples"] == []  # no nvidia-smi sampling on a CPU node


def test_compare_flags_a_corrupted_result():
    gemm = load("gemm")
    a = torch.randn(64, 512, dtype=torch.float32)
    b = torch.randn(512, 64, dtype=torch.float32)
    reference = a.double() @ b.double()
    good = a @ b
    assert gemm.compare(good, reference, "float32")[0] is True
    corrupted = good.clone()
    corrupted[7, 11] += 3.0  # one element off by about an eighth of the typical magnitude
    ok, ratio = gemm.compare(corrupted, reference, "float32")
    assert ok is False and ratio > 1
    corrupted[7, 11] = float("nan")
    assert gemm.compare(corrupted, reference, "float32") == (False, float("inf"))


def test_compare_accepts_bf16_rounding_but_not_a_bit_flip():
    gemm = load("gemm")
    a = torch.randn(64, 1024).bfloat16()
    b = torch.randn(1024, 64).bfloat16()
    reference = a.double() @ b.double()
    result = (a.float() @ b.float()).bfloat16()  # FP32 accumulate, BF16 output: like cuBLAS
    assert gemm.compare(result, reference, "bfloat16")[0] is True
    flipped = result.clone()
    flipped[3, 5] = -flipped[3, 5] * 4  # sign and exponent bits
    assert gemm.compare(flipped, reference, "bfloat16")[0] is False


def test_rates_keep_four_significant_figures_on_a_slow_device():
    """A 2-core sandbox shared by 32 nodes multiplies at about 0.0003 TFLOPS: rounded to four
    decimals an eighth of that (0.00004) read 0.0001 and a throttled node passed the fleet's
    75 %-below rule (make test-scale, 2026-12-04). Rates keep four significant figures."""
    gemm, allreduce = load("gemm"), load("allreduce")
    assert gemm.tflops(2 * 1024**3, 50.0) == 4.295e-05  # one 1024^3 product in 50 s
    assert gemm.tflops(2 * 8192**3 * 400, 1.0) == 439.8  # an H100's 400 products a second
    assert allreduce.four_figures((16 << 20) / 4.0 / 1e9) == 0.004194  # 16 MiB in 4 s
    assert allreduce.four_figures(429.49673) == 429.5


def test_the_clock_sampler_stops_and_joins(monkeypatch):
    """The GEMM's nvidia-smi sampler is a thread: its stop event was named `_stop`, which hides
    threading.Thread's own `_stop()`, so joining it raised TypeError and every GPU GEMM exited 1
    after its run (seen on an H200, `make gpu-check`, 2026-12-04; CPU nodes start no sampler)."""
    gemm = load("gemm")
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: the thread ends at once
    sampler = gemm.Sampler(0.01)
    sampler.start()
    sampler.stop()
    assert not sampler.is_alive() and sampler.error == "nvidia-smi not found"


def test_throttle_reason_bits_decode():
    gemm = load("gemm")
    assert gemm.decode_reasons(0x44) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert gemm.decode_reasons(0) == []


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [
        ("gpu[007-009,012],cpu1", "gpu007"),
        ("node1,node2", "node1"),
        ("rack[2-3]-gpu[01-04]", "rack2-gpu01"),
        ("kiln-node[01-02]", "kiln-node01"),
        ("single", "single"),
    ],
)
def test_first_host_of_a_slurm_hostlist(nodelist, first):
    assert load("allreduce").first_host(nodelist) == first


def test_rendezvous_from_slurm_and_torchrun_env():
    allreduce = load("allreduce")
    slurm = allreduce.rendezvous(
        {
            "SLURM_PROCID": "3",
            "SLURM_NTASKS": "16",
            "SLURM_LOCALID": "3",
            "SLURM_NODELIST": "gpu[010-011]",
            "SLURM_JOB_ID": "4242",
        }
    )
    assert slurm == {
        "rank": 3,
        "world_size": 16,
        "local_rank": 3,
        "master_addr": "gpu010",
        "master_port": 24242,
    }
    torchrun = allreduce.rendezvous(
        {
            "RANK": "1",
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29511",
            "SLURM_PROCID": "0",
        }
    )
    assert torchrun["rank"] == 1 and torchrun["master_addr"] == "10.0.0.1"
    assert allreduce.busbw(100.0, 8) == pytest.approx(175.0)
    assert allreduce.sizes(1024, 8192) == [1024, 2048, 4096, 8192]


def test_ranks_that_cannot_connect_say_so_for_the_launcher():
    """Rank 0 of two, its peer never started: the rendezvous times out, and the workload says
    the words its launcher starts the ranks again on (exit 75), not a crash's traceback."""
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}  # fmt: skip
    env.pop("SLURM_PROCID", None)
    proc = subprocess.run(
        [sys.executable, str(workload_path("allreduce")), "--timeout", "3"],
        env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert proc.returncode == 75 and proc.stdout == "", proc.stderr[-2000:]
    assert "allreduce: the ranks could not connect (rank 0 of 2): " in proc.stderr


def test_allreduce_between_two_local_processes():
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    env.pop("SLURM_PROCID", None)
    cmd = [
        sys.executable,
        str(workload_path("allreduce")),
        "--min-bytes",
        "4096",
        "--max-bytes",
        str(1 << 20),
        "--iters",
        "5",
        "--warmup",
        "2",
    ]
    procs = [
        subprocess.Popen(
            cmd,
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    assert outs[1][0] == ""  # only rank 0 prints
    doc = json.loads(outs[0][0])
    assert doc["kind"] == "allreduce" and doc["backend"] == "gloo" and doc["world_size"] == 2
    assert doc["implementation"] == "torch" and doc["wrong"] == 0
    assert len(doc["hosts"]) == 2 and doc["correct"] is True
    assert [r["bytes"] for r in doc["rows"]] == [4096 << k for k in range(9)]
    for row in doc["rows"]:
        assert row["busbw_gbs"] > 0
        assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * 2 * (2 - 1) / 2, rel=1e-3)
    assert doc["verdict_bytes"] == 1 << 20
    assert doc["verdict_busbw_gbs"] == doc["rows"][-1]["busbw_gbs"]


def test_a_torch_built_without_libuv_rendezvous_through_the_classic_store(monkeypatch):
    """Debian 13's torch 2.6 fails init_process_group with its default libuv store (the error
    below is what it printed in the Debian 13 sandbox); the workload chooses USE_LIBUV=0 there,
    and keeps torch's default where the libuv store works (this machine's torch)."""
    allreduce = load("allreduce")
    assert allreduce.libuv_store_missing() is False

    def debian_store(*args, **kwargs):
        raise RuntimeError("use_libuv was requested but PyTorch was build without libuv support")

    monkeypatch.setattr(allreduce.dist, "TCPStore", debian_store)
    assert allreduce.libuv_store_missing() is True

    def old_store(host, port, world, is_master, timeout=None):  # torch 1.13's signature
        raise AssertionError("never reached: torch 1.13 rejects use_libuv first")

    monkeypatch.setattr(allreduce.dist, "TCPStore", old_store)
    assert allreduce.libuv_store_missing() is False
