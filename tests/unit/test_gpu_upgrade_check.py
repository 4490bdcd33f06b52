"""kiln.gpu.diag: the DCGM check after a driver upgrade decides whether the node goes back into
Slurm. Only a diag that ran and passed resumes it; one that could not run (no dcgmi, no host
engine, unreadable output, a required test skipped or warned) leaves it drained as not validated,
against the recorded real `dcgmi diag` outputs (tests/fixtures/real/dcgmi-diag/SOURCE.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.gpu.diag import upgrade_check
from kiln.gpu.filters import FILTERS

REAL = Path(__file__).parents[1] / "fixtures" / "real" / "dcgmi-diag"
BLACKWELL = REAL / "rtxpro6000_blackwell_x2_r3_hardware_all_skip_dcgm339.txt"
V100 = REAL / "v100_pcie_r3_verbose_pass_eud_skip_dcgm339.txt"
H100_FAIL = shared_capture("dcgmi-diag/h100x8_r3_fail_cuinit_no_fabricmanager_dcgm338.txt")
GB10_FAIL = REAL / "gb10_r1_json_software_fail_dcgm423.json"
NO_ENGINE = REAL / "no_hostengine_connection_refused_dcgm.txt"


def _ran(path: Path, rc: int = 0, stderr: str = "") -> dict:
    """What Ansible's command module registers for `dcgmi diag --run 1`."""
    return {"rc": rc, "stdout": path.read_text(), "stderr": stderr, "changed": False}


def test_the_role_uses_this_filter():
    assert FILTERS["kiln_dcgmi_upgrade_check"] is upgrade_check


def test_a_diag_that_ran_and_passed_its_deployment_tests_resumes_the_node():
    """The real Blackwell run: every Deployment check Pass (its hardware tests are level 3's)."""
    verdict = upgrade_check(_ran(BLACKWELL), installed=True)
    assert verdict == {
        "validated": True,
        "failed": False,
        "why": "dcgm r1: 9 deployment test(s) passed",
    }


def test_without_dcgmi_the_node_is_not_validated_and_stays_drained():
    verdict = upgrade_check({"skipped": True, "changed": False}, installed=False)
    assert verdict == {
        "validated": False,
        "failed": False,
        "why": "not validated: dcgmi is not installed (DCGM: the nvidia_dcgm role)",
    }


@pytest.mark.parametrize("where", ["stdout", "stderr"])
def test_a_host_engine_that_does_not_answer_is_not_validated(where):
    said = NO_ENGINE.read_text()
    result = {"rc": 255, "stdout": "", "stderr": "", where: said}
    verdict = upgrade_check(result, installed=True)
    assert not verdict["validated"] and not verdict["failed"]
    assert verdict["why"] == (
        "not validated: nv-hostengine does not answer (dcgmi exit 255: Error: unable to "
        "establish a connection to the specified host: localhost); start nvidia-dcgm"
    )


def test_a_failed_deployment_test_fails_naming_it():
    """The real GB10 document: software Fail (persistence mode) on GPU 0, dcgmi exit 226."""
    verdict = upgrade_check(_ran(GB10_FAIL, rc=226), installed=True)
    assert not verdict["validated"] and verdict["failed"]
    assert verdict["why"].startswith("failed: software (GPU 0): Persistence Mode")


def test_a_failed_test_at_any_level_fails():
    verdict = upgrade_check(_ran(H100_FAIL, rc=226), installed=True)
    assert verdict["failed"] and not verdict["validated"]
    assert verdict["why"].startswith("failed: GPU Memory (all GPUs): GPU 0 Error using CUDA API")


def test_a_skipped_or_warned_deployment_test_is_not_validated():
    """The real healthy V100 run with its Deployment rows turned to Skip and to Warn: the quick
    check proves the new driver only through those tests, so neither is a pass."""
    text = V100.read_text()
    row = "| Denylist                  | "
    for word in ("Skip", "Warn"):
        changed = text.replace(row + "Pass", row + word)
        assert changed != text
        verdict = upgrade_check({"rc": 0, "stdout": changed, "stderr": ""}, installed=True)
        assert not verdict["validated"] and not verdict["failed"]
        assert verdict["why"].startswith(f"not validated: Denylist {word}")


def test_unreadable_output_or_a_non_zero_exit_without_a_failure_is_not_validated():
    cut = GB10_FAIL.read_text()[:300]
    verdict = upgrade_check({"rc": 137, "stdout": cut, "stderr": ""}, installed=True)
    assert not verdict["validated"] and not verdict["failed"]
    assert verdict["why"].startswith("not validated: unreadable dcgmi diag output (exit 137;")
    verdict = upgrade_check(_ran(BLACKWELL, rc=1, stderr="oops"), installed=True)
    assert verdict == {
        "validated": False,
        "failed": False,
        "why": "not validated: dcgmi exited 1 with no test failed (oops)",
    }
