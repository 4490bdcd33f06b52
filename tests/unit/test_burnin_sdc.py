"""Silent data corruption: one flipped bit anywhere in a GEMM product is caught (workloads/gemm.py,
torch on this CPU), and the workload reports it end to end so judging names the device."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys

import pytest

from kiln.burnin.workloads import workload_path

pytestmark = pytest.mark.local
torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")

TRIALS = 1000


def gemm():
    spec = importlib.util.spec_from_file_location("kiln_workload_gemm_sdc", workload_path("gemm"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("dtype", "width"), [("bfloat16", 16), ("float32", 32)])
def test_one_flipped_bit_anywhere_is_caught_in_1000_random_trials(dtype, width):
    g = gemm()
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(48, 96, generator=gen).to(getattr(torch, dtype))
    b = torch.randn(96, 40, generator=gen).to(getattr(torch, dtype))
    product = a @ b
    reference = g.bit_sums(product)
    clean_digest = g.digest(reference)
    rng = random.Random(20250)
    caught, located, low_mantissa = 0, 0, 0
    for _ in range(TRIALS):
        row, col = rng.randrange(product.shape[0]), rng.randrange(product.shape[1])
        bit = rng.randrange(width)  # sign, exponent and every mantissa bit, the lowest too
        low_mantissa += bit < 4
        flipped = product.clone()
        g.flip_bit(flipped, row, col, bit)
        assert not torch.equal(
            flipped.view(g.INT_VIEW[flipped.dtype]), product.view(g.INT_VIEW[product.dtype])
        )
        sums = g.bit_sums(flipped)
        if g.digest(sums) != clean_digest:  # what gemm.py compares, across GPUs and repeats
            caught += 1
        located += g.first_difference(sums, reference) == (row, col)
    assert low_mantissa > TRIALS // 20  # the hardest case was drawn many times
    assert caught >= 0.99 * TRIALS  # the bar; bitwise comparison gives all of them
    assert caught == TRIALS and located == TRIALS


def test_a_low_mantissa_flip_passes_the_fp64_tolerance_but_not_the_bitwise_check():
    """Why the bitwise check exists: the FP64 comparison allows BF16's rounding."""
    g = gemm()
    a = torch.randn(64, 256).bfloat16()
    b = torch.randn(256, 64).bfloat16()
    product = (a.float() @ b.float()).bfloat16()
    reference = a.double() @ b.double()
    flipped = product.clone()
    g.flip_bit(flipped, 17, 33, 0)
    assert g.compare(flipped, reference, "bfloat16")[0] is True
    assert g.first_difference(g.bit_sums(flipped), g.bit_sums(product)) == (17, 33)
    g.flip_bit(flipped, 17, 33, 0)  # flipping back restores it exactly
    assert g.digest(g.bit_sums(flipped)) == g.digest(g.bit_sums(product))


def test_every_device_multiplies_the_same_matrices():
    g = gemm()
    one, two = g.Inputs(32, torch.bfloat16), g.Inputs(32, torch.bfloat16)
    assert torch.equal(one.a.view(torch.int16), two.a.view(torch.int16))
    assert torch.equal(one.b.view(torch.int16), two.b.view(torch.int16))
    assert torch.allclose(one.colsum, (one.a.double().sum(0) @ one.b.double()))


def test_an_injected_bitflip_is_reported_and_judged_end_to_end(tmp_path):
    from kiln.judging.results import gemm_from_doc

    proc = subprocess.run(
        [sys.executable, str(workload_path("gemm")), "--seconds", "1", "--n", "128"]
        + ["--inject-bitflip", "0,0,5,7,0"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    doc = json.loads(proc.stdout)
    [device] = doc["devices"]
    assert device["bit_mismatches"] == 1 and device["bit_checks"] >= 1
    assert device["first_mismatch"]["check"] == 0
    assert (device["first_mismatch"]["row"], device["first_mismatch"]["col"]) == (5, 7)
    assert device["reference_ok"] is True  # the lowest mantissa bit: within FP32 tolerance
    assert device["checksum_ok"] is False
    assert gemm_from_doc("cpu1", doc).devices[0].bit_mismatches == 1
