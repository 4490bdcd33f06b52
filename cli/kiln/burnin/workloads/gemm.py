#!/usr/bin/env python3
"""kiln burn-in GEMM: every device of this node at once, a dense matmul sustained for a set time.

Standalone: python3 + torch, stdlib otherwise (no kiln import). Prints one JSON document on
stdout; diagnostics go to stderr.

    python3 gemm.py --seconds 60            # BF16 on every CUDA GPU, FP32 on a CPU-only node

Per device (one thread each, started together behind a barrier so the node is loaded as a whole)
it reports achieved TFLOPS = 2 n^3 x iterations / seconds. Every device multiplies the same
seeded matrices, so every product of the node is bitwise the same; it checks for silent data
corruption bitwise after every batch (`bit_sums`: one flipped bit anywhere changes a row and a
column sum; they must equal the device's first product's, whose `digest` kiln compares across
the node's GPUs when judging), and against FP64 references made on the CPU at the first batch,
every REFERENCE_EVERY-th and the last (`compare`: a 64x64 tile and the column sums, within the
dtype's rounding). `--inject-bitflip` flips one bit of a product: proof that the check fires.
While it runs, `nvidia-smi --query-gpu` is sampled for clocks, temperature, power and the
active clock event (throttle) reasons, summarised per device.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import warnings
from datetime import UTC, datetime

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402

SCHEMA_VERSION = 1
TILE = 64
SEED = 20250  # the same matrices on every device, so every product of a node is the same
REFERENCE_EVERY = 10  # batches between two comparisons with the FP64 references
# The integer type of the same width, to read a product's bits as numbers.
INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
# (rtol, atol as a fraction of the reference's RMS) per dtype: BF16 rounds its output to 8
# mantissa bits (2^-9 relative); FP32 accumulates in FP32.
TOLERANCE = {"bfloat16": (2**-6, 2**-6), "float16": (2**-8, 2**-8), "float32": (1e-4, 1e-4)}
SMI_FIELDS = ("index", "pci.bus_id", "clocks.sm", "clocks.max.sm", "temperature.gpu", "power.draw")
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode_reasons(mask: int) -> list[str]:
    """nvidia-smi's clocks_event_reasons.active bitmask -> reason names."""
    return [name for bit, name in REASON_BITS.items() if mask & bit]


def compare(result: torch.Tensor, reference: torch.Tensor, dtype: str) -> tuple[bool, float]:
    """(ok, worst error as a multiple of the allowed error) of `result` against `reference`.

    Allowed per element: rtol x |ref| + atol x RMS(ref), from the dtype's TOLERANCE. NaN or
    infinity anywhere is never ok.
    """
    res = result.detach().to("cpu", torch.float64)
    ref = reference.detach().to("cpu", torch.float64)
    rtol, atol = TOLERANCE[dtype]
    scale = ref.pow(2).mean().sqrt().item() or 1.0
    allowed = rtol * ref.abs() + atol * scale
    worst = ((res - ref).abs() / allowed).max().item()
    if not math.isfinite(worst):
        return False, math.inf
    return worst <= 1.0, worst


def bit_sums(result: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column sums of a 2-D result's bits read as integers, in int64: exact.

    Flipping bit k of one element changes its integer by +-2^k (the sign bit too, in two's
    complement), so its row sum and its column sum change, whatever the other elements hold."""
    words = result.view(INT_VIEW[result.dtype])
    return words.sum(dim=1, dtype=torch.int64), words.sum(dim=0, dtype=torch.int64)


def digest(sums: tuple[torch.Tensor, torch.Tensor]) -> str:
    """A short hash of `bit_sums`, equal on two devices exactly when their products are."""
    values = [v for part in sums for v in part.tolist()]
    return hashlib.sha256(struct.pack(f"<{len(values)}q", *values)).hexdigest()[:32]


def first_difference(sums: tuple, reference: tuple) -> tuple[int, int]:
    """(row, column) of the first row and column sums that differ (-1: none in that axis)."""
    where = [torch.nonzero(a != b).flatten() for a, b in zip(sums, reference, strict=True)]
    return (int(where[0][0]) if len(where[0]) else -1, int(where[1][0]) if len(where[1]) else -1)


def flip_bit(result: torch.Tensor, row: int, col: int, bit: int) -> None:
    """Flip one bit of one element, in place (`--inject-bitflip`, and the tests)."""
    words = result.view(INT_VIEW[result.dtype])
    width = result.element_size() * 8
    mask = 1 << bit
    if mask >= 1 << (width - 1):
        mask -= 1 << width  # the sign bit, as the signed integer type holds it
    words[row, col].bitwise_xor_(mask)


class Sampler(threading.Thread):
    """Polls `nvidia-smi --query-gpu` every `interval` seconds until stopped."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.samples: list[dict] = []
        self.error: str | None = None
        self._stopping = threading.Event()  # not `_stop`: Thread has its own
        self._fields = self._probe()

    def _probe(self) -> tuple[str, ...] | None:
        if shutil.which("nvidia-smi") is None:
            self.error = "nvidia-smi not found"
            return None
        for reasons in REASON_FIELDS:  # newer drivers say "event", older ones "throttle"
            fields = (*SMI_FIELDS, reasons)
            if self._query(fields) is not None:
                return fields
        return None

    def _query(self, fields: tuple[str, ...]) -> list[list[str]] | None:
        cmd = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.error = str(exc)
            return None
        if proc.returncode != 0:
            self.error = (proc.stdout + proc.stderr).strip()[:200]
            return None
        return [[c.strip() for c in line.split(",")] for line in proc.stdout.splitlines() if line]

    def run(self) -> None:
        while self._fields and not self._stopping.is_set():
            now = time.time()
            for row in self._query(self._fields) or []:
                if len(row) == len(self._fields):
                    self.samples.append({"t": round(now, 3), **_sample(row)})
            self._stopping.wait(self.interval)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=30)


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _sample(row: list[str]) -> dict:
    mask = int(row[6], 16) if row[6].lower().startswith("0x") else 0
    return {
        "index": int(row[0]),
        "pci_bus_id": row[1],
        "sm_mhz": _num(row[2]),
        "max_sm_mhz": _num(row[3]),
        "temp_c": _num(row[4]),
        "power_w": _num(row[5]),
        "reasons": decode_reasons(mask),
    }


def summarise(samples: list[dict], smi_index: int) -> dict:
    """Per device: sample count, SM clock min/mean, max temperature and power, reasons seen."""
    mine = [s for s in samples if s["index"] == smi_index]
    clocks = [s["sm_mhz"] for s in mine if s["sm_mhz"] is not None]
    reasons = sorted({r for s in mine for r in s["reasons"]} - {"gpu_idle"})
    return {
        "samples": len(mine),
        "sm_mhz_min": min(clocks) if clocks else None,
        "sm_mhz_mean": round(sum(clocks) / len(clocks), 1) if clocks else None,
        "sm_mhz_max_rated": max((s["max_sm_mhz"] or 0 for s in mine), default=None),
        "temp_c_max": max((s["temp_c"] or 0 for s in mine), default=None),
        "power_w_max": max((s["power_w"] or 0 for s in mine), default=None),
        "throttle_reasons": reasons,
    }


def smi_index(index: int) -> int:
    """nvidia-smi's index of torch's device `index` (CUDA_VISIBLE_DEVICES, PCI order)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    parts = [p.strip() for p in visible.split(",") if p.strip()]
    if index < len(parts) and parts[index].isdigit():
        return int(parts[index])
    return index


def cpu_name() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"


def tflops(flops: float, seconds: float) -> float:
    """TFLOPS to 4 significant figures, not decimals (a shared CPU runs at about 0.0003)."""
    return float(f"{flops / seconds / 1e12:.4g}") if seconds else 0.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Inputs:
    """The matrices every device multiplies, made once on the CPU, and their FP64 references."""

    def __init__(self, n: int, dtype: torch.dtype) -> None:
        gen = torch.Generator().manual_seed(SEED)
        self.a = torch.randn((n, n), generator=gen).to(dtype)
        self.b = torch.randn((n, n), generator=gen).to(dtype)
        tile = min(TILE, n)
        self.tile = self.a[:tile].double() @ self.b[:, :tile].double()
        ones_a = self.a.sum(dim=0, dtype=torch.float64)
        self.colsum = torch.zeros(n, dtype=torch.float64)
        for start in range(0, n, 1024):  # (1^T A) B in slices: no n x n FP64 copy of B
            self.colsum += ones_a[start : start + 1024] @ self.b[start : start + 1024].double()


class DeviceRun:
    """The matmul loop on one device; `result` is its entry in the `devices` list."""

    def __init__(self, index: int, device: torch.device, inputs: Inputs) -> None:
        self.index, self.device, self.inputs = index, device, inputs
        self.dtype_name = str(inputs.a.dtype).removeprefix("torch.")
        self.flip: tuple[int, ...] | None = None  # (check, row, col, bit): --inject-bitflip
        self.result: dict = {"index": index, "dtype": self.dtype_name}

    def setup(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            self.result["name"] = torch.cuda.get_device_name(self.device)
        else:
            self.result["name"] = cpu_name()
        self.a = self.inputs.a.to(self.device)
        self.b = self.inputs.b.to(self.device)
        self.c = torch.empty_like(self.a)
        torch.matmul(self.a, self.b, out=self.c)  # warm-up: kernels chosen, clocks up
        _sync(self.device)
        self.reference = bit_sums(self.c)  # every later product must be bitwise this one
        self.result["digest"] = digest(self.reference)

    def check_reference(self) -> None:
        """The product against the FP64 references: the tile and the column sums."""
        tile = self.inputs.tile.shape[1]
        tile_ok, tile_err = compare(self.c[:tile, :tile], self.inputs.tile, self.dtype_name)
        colsum = self.c.sum(dim=0, dtype=torch.float64)
        sum_ok, sum_err = compare(colsum, self.inputs.colsum, self.dtype_name)
        r = self.result
        r["reference_ok"] = r["reference_ok"] and tile_ok and sum_ok
        r["reference_checks"] += 1
        self.worst = max(self.worst, tile_err, sum_err)

    def check_bits(self) -> None:
        """The product bitwise against the device's first one (`bit_sums`)."""
        r = self.result
        check, r["bit_checks"] = r["bit_checks"], r["bit_checks"] + 1
        if self.flip is not None and self.flip[0] == check:
            flip_bit(self.c, *self.flip[1:])
        sums = bit_sums(self.c)
        if all(torch.equal(mine, ref) for mine, ref in zip(sums, self.reference, strict=True)):
            return
        r["bit_mismatches"] += 1
        if "first_mismatch" not in r:
            row, col = first_difference(sums, self.reference)
            r["first_mismatch"] = {"check": check, "row": row, "col": col, "digest": digest(sums)}

    def run(self, seconds: float, barrier: threading.Barrier) -> None:
        try:
            self.setup()
            start = time.perf_counter()
            torch.matmul(self.a, self.b, out=self.c)
            _sync(self.device)
            per_iter = max(time.perf_counter() - start, 1e-6)
            batch = max(1, min(1000, int(0.25 / per_iter)))  # about 4 checks a second
        except Exception as exc:  # a dead GPU is a result, not a crash
            self.result.update(error=f"{type(exc).__name__}: {exc}"[:500], checksum_ok=False)
            barrier.abort()
            return
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            self.result.update(error="another device failed to start", checksum_ok=False)
            return
        r, iterations, busy, self.worst = self.result, 0, 0.0, 0.0
        r.update(bit_checks=0, bit_mismatches=0, reference_checks=0, reference_ok=True)
        try:
            while busy < seconds:
                start = time.perf_counter()
                for _ in range(batch):
                    torch.matmul(self.a, self.b, out=self.c)
                _sync(self.device)
                busy += time.perf_counter() - start
                iterations += batch
                self.check_bits()
                if (r["bit_checks"] - 1) % REFERENCE_EVERY == 0 or busy >= seconds:
                    self.check_reference()  # the first, every REFERENCE_EVERY-th, the last
        except Exception as exc:
            r.update(error=f"{type(exc).__name__}: {exc}"[:500], reference_ok=False)
        flops = 2.0 * self.a.shape[0] ** 3 * iterations
        r.update(
            tflops=tflops(flops, busy),
            iterations=iterations,
            seconds=round(busy, 3),
            checksum_ok=r["reference_ok"] and r["bit_mismatches"] == 0,
            check_error_ratio=round(self.worst, 4) if math.isfinite(self.worst) else None,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="kiln burn-in: sustained dense matmul per device")
    parser.add_argument("--seconds", type=float, default=60.0, help="timed duration per device")
    parser.add_argument("--n", type=int, default=None, help="matrix size (GPU 8192, CPU 1024)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument(
        "--inject-bitflip",
        type=lambda text: tuple(int(part) for part in text.split(",")),
        metavar="DEVICE,CHECK,ROW,COL,BIT",
        help="self-test: flip one bit of DEVICE's product before its CHECK-th bitwise check",
    )
    parser.add_argument("--sample-interval", type=float, help="nvidia-smi period, s (seconds/600)")
    args = parser.parse_args(argv)
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        print("gemm: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    n = args.n or (8192 if use_cuda else 1024)
    inputs = Inputs(n, torch.bfloat16 if use_cuda else torch.float32)
    flip_device, *flip = args.inject_bitflip or (None,)
    runs = [
        DeviceRun(i, torch.device("cuda", i) if use_cuda else torch.device("cpu"), inputs)
        for i in range(torch.cuda.device_count() if use_cuda else 1)
    ]
    if flip_device is not None:
        runs[flip_device].flip = tuple(flip)
    interval = args.sample_interval or max(1.0, args.seconds / 600)
    sampler = Sampler(interval) if use_cuda else None
    if sampler:
        sampler.start()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    barrier = threading.Barrier(len(runs))
    threads = [threading.Thread(target=r.run, args=(args.seconds, barrier)) for r in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    devices = [r.result for r in runs]
    if sampler:
        sampler.stop()
        for r in runs:
            r.result["clocks"] = summarise(sampler.samples, smi_index(r.index))
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "gemm",
        "hostname": socket.gethostname().split(".")[0],
        "started": started,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        # ROCm's torch answers torch.cuda on HIP (AMD Instinct): its HIP release, else None
        "hip_version": getattr(torch.version, "hip", None),
        "device_kind": "cuda" if use_cuda else "cpu",
        "n": n,
        "seed": SEED,  # the same product on every device: their digests must agree
        "seconds_requested": args.seconds,
        "devices": devices,
        "sampler_error": sampler.error if sampler else None,
        "samples": sampler.samples if sampler else [],
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
