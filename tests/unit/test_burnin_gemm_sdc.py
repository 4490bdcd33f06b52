"""Judging silent data corruption: a GPU whose product differs bitwise from its node's other GPUs,
or changed between repeats, fails `checksum` by name (kiln.judging.rules_gemm)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kiln.burnin import judge_run
from kiln.inventory import require_valid
from kiln.judging import Severity
from kiln.judging.results import GemmDevice
from kiln.judging.rules_gemm import digest_outliers

GPU8 = Path(__file__).parents[1] / "fixtures" / "burnin" / "gpu8"
GOOD, BAD = "9b1f" * 8, "77aa" * 8


def devices(*digests, mismatches=()):
    return tuple(
        GemmDevice(i, "H100", 700.0, True, digest=d, bit_mismatches=m, bit_checks=240)
        for i, (d, m) in enumerate(zip(digests, mismatches or [0] * len(digests), strict=True))
    )


def test_the_gpu_outside_the_majority_is_named():
    assert digest_outliers(devices(*[GOOD] * 3, BAD, *[GOOD] * 4)) == {
        3: "product differs bitwise from the 7/8 GPUs that agree"
    }
    assert digest_outliers(devices(*[GOOD] * 8)) == {}
    assert digest_outliers(devices(GOOD)) == {}  # one GPU: only its repeats can tell
    assert digest_outliers(devices(None, None)) == {}  # records from before the digest


def test_without_a_majority_every_gpu_is_named():
    odd = digest_outliers(devices(GOOD, BAD))
    assert odd == {i: "products differ bitwise across 2 GPUs, no majority" for i in (0, 1)}
    assert set(digest_outliers(devices(GOOD, GOOD, BAD, BAD))) == {0, 1, 2, 3}


@pytest.fixture
def run(tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(GPU8 / "run", copy)
    return copy


def edit(run: Path, node: str, change) -> None:
    path = run / "gemm" / f"{node}.json"
    doc = json.loads(path.read_text())
    for device in doc["devices"]:
        change(device)
    path.write_text(json.dumps(doc))


def test_a_gpu_with_a_different_digest_fails_checksum_by_name(run):
    edit(run, "gpu001", lambda d: d.update(digest=BAD if d["index"] == 3 else GOOD))
    report = judge_run(run, require_valid(GPU8 / "inventory"))
    failing = {v.name for v in report.failures if v.check == "checksum"}
    assert failing == {"gpu001", "gpu001/gpu3", "gpu006", "gpu006/gpu2"}
    verdict = next(v for v in report.failures if v.name == "gpu001/gpu3")
    assert verdict.severity is Severity.CRITICAL
    reason = report.drain()["gpu001"]
    assert reason == (
        "kiln: gemm gpu3 product differs bitwise from the 7/8 GPUs that agree "
        "(silent data corruption)"
    )
    assert len(reason) < 100


def test_a_product_that_changed_between_repeats_fails_checksum(run):
    edit(run, "gpu001", lambda d: d.update(digest=GOOD, bit_checks=240))
    edit(run, "gpu001", lambda d: d.update(bit_mismatches=2 if d["index"] == 5 else 0))
    report = judge_run(run, require_valid(GPU8 / "inventory"))
    assert report.drain()["gpu001"] == (
        "kiln: gemm gpu5 product changed in 2/240 repeats (silent data corruption)"
    )


def test_healthy_digests_change_nothing(run):
    edit(run, "gpu001", lambda d: d.update(digest=GOOD, bit_checks=240, bit_mismatches=0))
    report = judge_run(run, require_valid(GPU8 / "inventory"))
    assert "gpu001" not in report.drain()
