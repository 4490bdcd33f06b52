"""The fabric gate of a GPU in a multi-node NVLink domain (#32, kiln.gpu.facts.check with
kiln_nvlink_domain): every GPU of an NVL72 tray has joined the rack's NVLink domain (fabric
state Completed, status Success, ClusterUUID and CliqueId set) and is in the declared one.
Judged on real GB200, GB300 and B200 `nvidia-smi -q -x` captures; the degraded trays are those
captures with the fabric state a tray reports while it waits for the rack's NVLink switches."""

from __future__ import annotations

import pytest

from captures import shared_capture
from kiln.gpu.facts import Expected, check, summarise, unreported
from kiln.gpu.filters import gpu_check
from kiln.parsers.nvidia_smi import parse_xml

GB200 = "nvidia-smi-q-x/gb200_4gpu_p6e_arm64_fabric_completed_clique2_k8stestinfra.xml"
GB300 = "nvidia-smi-q-x/gb300_4gpu_fabric_completed_clique32766_k8stestinfra.xml"
B200 = "nvidia-smi-q-x/b200_8gpu_fabric_completed_clique0_k8stestinfra.xml"
GB200_DOMAIN = "00000001-0000-0000-0000-000000000001.2"


def summary(capture: str, edit=lambda text: text) -> dict:
    return summarise(parse_xml(edit(shared_capture(capture).read_text())))


def expect(declared: str | None, gpus: int = 4) -> Expected:
    return Expected(gpu_count=gpus, nvlink_domain=declared, health=False)


def test_a_tray_that_joined_its_declared_rack_passes():
    assert check(summary(GB200), expect(GB200_DOMAIN)) == []
    (domain,) = {gpu["nvlink_domain"] for gpu in summary(GB300)["gpus"]}
    assert domain.endswith(".32766")
    assert check(summary(GB300), expect(domain)) == []
    # A rack named by the site (not ClusterUUID.CliqueId): joined is enough.
    assert check(summary(GB300), expect("rack-a12")) == []


def test_a_tray_in_another_rack_than_declared_fails_naming_both():
    other = "00000001-0000-0000-0000-000000000001.7"
    problems = check(summary(GB200), expect(other))
    assert len(problems) == 4
    assert problems[0] == (
        f"GPU 0: in NVLink domain {GB200_DOMAIN}, the inventory declares {other} "
        "(kiln_nvlink_domain): another rack, or the inventory is wrong"
    )


@pytest.mark.parametrize(("state", "status"), [("In Progress", "N/A"), ("Completed", "Failure")])
def test_a_tray_that_has_not_joined_fails(state, status):
    def degrade(text: str) -> str:
        return text.replace("<state>Completed</state>", f"<state>{state}</state>", 1).replace(
            "<status>Success</status>", f"<status>{status}</status>", 1
        )

    problems = check(summary(GB200, degrade), expect(GB200_DOMAIN))
    assert len(problems) == 1
    assert problems[0].startswith(f"GPU 0: NVLink fabric state {state}")
    assert "has not joined its NVLink domain" in problems[0]


def test_a_gpu_of_no_multi_node_domain_declared_in_one_fails():
    # HGX B200: a single-node NVSwitch fabric, clique 0 of the all-zero ClusterUUID: no domain.
    problems = check(summary(B200), expect("rack-a12", gpus=8))
    assert problems[0] == "GPU 0: no NVLink domain (ClusterUUID or CliqueId unset)"
    assert check(summary(B200), expect(None, gpus=8)) == []  # not declared: not judged


def test_the_roles_filter_takes_the_declared_domain():
    assert gpu_check(summary(GB200), 4, health=False, nvlink_domain=GB200_DOMAIN) == []
    assert gpu_check(summary(GB200), 4, health=False, nvlink_domain="") == []
    assert len(gpu_check(summary(GB200), 4, health=False, nvlink_domain=GB200_DOMAIN[:-1] + "3"))


def test_health_figures_reported_as_na_are_named_not_judged():
    # Real captures: the 580 driver reports retired pages as N/A on Blackwell and Hopper alike.
    for capture, gpus in ((GB200, 4), (B200, 8)):
        found = summary(capture)
        assert found["unreported"] == [
            "retired pages: not reported on every GPU (N/A), so not checked",
            "GPU reset required: not reported on every GPU (N/A), so not checked",
        ]
        assert check(found, Expected(gpu_count=gpus)) == []  # not a fault
    one = summary(GB200)
    one["gpus"][2]["remapped_rows_pending"] = None
    assert unreported(one)[1] == "remapped rows: not reported on GPU 2 (N/A), so not checked"
