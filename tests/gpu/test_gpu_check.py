"""`make gpu-check`: read-only checks on a machine with an NVIDIA GPU; skipped without one.

They change nothing on the GPU (no power limits, clocks or resets): they read nvidia-smi and
run matmuls.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.burnin.workloads import workload_path
from kiln.parsers.nvidia_smi import parse_xml
from kiln.parsers.nvidia_smi_query import parse_query_gpu_csv
from kiln.profiles import profile_for_product_name
from local_facts import local_facts

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

requires_nvidia_smi = pytest.mark.skipif(
    shutil.which("nvidia-smi") is None, reason="no nvidia-smi: not a GPU machine"
)


def _cuda_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@requires_nvidia_smi
def test_nvidia_smi_is_read_into_typed_facts(capsys):
    log = parse_xml(
        subprocess.run(
            ["nvidia-smi", "-q", "-x"], capture_output=True, text=True, check=True
        ).stdout
    )
    csv = parse_query_gpu_csv(
        subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=index,name,serial,driver_version,power.limit",
                "--format=csv",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert log.gpu_count == log.attached_gpus == len(csv) >= 1
    assert log.driver_version and all(gpu.product_name for gpu in log.gpus)
    assert [gpu.product_name for gpu in log.gpus] == [row.get_text("name") for row in csv]
    with capsys.disabled():
        for gpu in log.gpus:
            profile = profile_for_product_name(gpu.product_name)
            print(
                f"\nGPU {gpu.index}: {gpu.product_name} -> profile "
                f"{profile.id if profile else 'unknown'}; driver {log.driver_version}, "
                f"CUDA {log.cuda_version}, power limit {gpu.power.current_limit_w} W"
            )


@requires_nvidia_smi
def test_kiln_facts_reads_the_real_gpus_and_changes_nothing(tmp_path, capsys):
    """Preflight through a local connection, then `kiln facts`: model, count, driver, serials."""
    smi = parse_xml(
        subprocess.run(
            ["nvidia-smi", "-q", "-x"], capture_output=True, text=True, check=True
        ).stdout
    )
    summary, facts = local_facts(tmp_path)
    assert summary["changed"] == 0
    seen = facts["nvidia_smi"]
    assert seen["gpu_count"] == smi.gpu_count == facts["gpu_count"]  # nvidia-smi and the PCI bus
    assert seen["driver_version"] == smi.driver_version
    assert [gpu["product_name"] for gpu in seen["gpus"]] == [g.product_name for g in smi.gpus]
    assert [gpu["serial"] for gpu in seen["gpus"]] == [g.serial for g in smi.gpus]
    assert facts["gpu_stack"]["driver"] is None or facts["gpu_stack"]["driver"].startswith(
        smi.driver_version.split(".")[0]
    )
    with capsys.disabled():
        print(f"\nkiln facts: {seen['gpu_count']} GPU(s), driver {seen['driver_version']}")
        for gpu in seen["gpus"]:
            print(
                f"  GPU {gpu['index']} {gpu['product_name']} serial {gpu['serial']} "
                f"power limit {gpu['power_limit_w']} W, ECC {gpu['ecc_mode']}, "
                f"fabric {gpu['fabric_state']}"
            )


# The baseline's sweep: torch's best over these sizes and the two 16-bit dtypes the tensor cores
# run at full rate, not one size (one size can sit on a slow tile shape or a cache edge).
SWEEP_SIZES = (2048, 4096, 8192, 12288, 16384)
SWEEP_DTYPES = ("bfloat16", "float16")


def _matmul_tflops(torch, n: int, dtype: str, seconds: float) -> float:
    """The best rate torch's own `a @ b` reaches at one size and dtype on GPU 0."""
    a = torch.randn(n, n, device="cuda", dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device="cuda", dtype=getattr(torch, dtype))
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    best, deadline = 0.0, time.monotonic() + seconds
    repeats = max(1, int(20 * (8192 / n) ** 3))  # each timing about as long as 20 at 8192
    while time.monotonic() < deadline:
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        torch.cuda.synchronize()
        best = max(best, 2 * n**3 * repeats / (time.perf_counter() - start) / 1e12)
    return best


def _torch_peak_tflops(torch, seconds_each: float = 1.5) -> tuple[float, dict]:
    """torch's best matmul rate over the sweep: the baseline, and every point of the sweep."""
    sweep = {
        (n, dtype): _matmul_tflops(torch, n, dtype, seconds_each)
        for dtype in SWEEP_DTYPES
        for n in SWEEP_SIZES
    }
    return max(sweep.values()), sweep


def test_gemm_workload_reaches_85_percent_of_torch_peak(capsys):
    torch = _cuda_torch()
    if torch is None:
        pytest.skip("no CUDA build of torch with a visible GPU")
    peak, sweep = _torch_peak_tflops(torch)
    with capsys.disabled():
        print("\ntorch matmul sweep on GPU 0 (TFLOPS):")
        for (n, dtype), tflops in sorted(sweep.items()):
            print(f"  {dtype:<9} n={n:<6} {tflops:7.1f}")
    proc = subprocess.run(
        [sys.executable, str(workload_path("gemm")), "--seconds", "15"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    with capsys.disabled():
        for device in result["devices"]:
            print(
                f"\ngemm {device['name']}: {device['tflops']:.1f} TFLOPS "
                f"({device['dtype']}); torch's best over the sweep {peak:.1f} TFLOPS; ratio "
                f"{device['tflops'] / peak:.3f}"
            )
    for device in result["devices"]:
        assert device["checksum_ok"], device
        assert device["tflops"] >= 0.85 * peak, (device["tflops"], peak)
