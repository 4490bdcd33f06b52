"""`kiln facts` through a local connection on this (GPU-less) machine: the path make gpu-check
takes on a GPU machine, checked here where there is no nvidia-smi."""

from __future__ import annotations

import shutil

import pytest

from local_facts import local_facts

pytestmark = pytest.mark.integration


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="tests/gpu covers GPU machines")
def test_local_preflight_reads_this_machine_and_changes_nothing(tmp_path):
    summary, facts = local_facts(tmp_path)
    assert facts["nvidia_smi"] is None  # no driver here: nothing to read, nothing failed
    assert facts["gpu_count"] == 0 and facts["cpus"] >= 1 and facts["memory_mb"] > 0
    assert facts["gpu_stack"] == {"driver": None, "cuda": None, "nccl": None}
    assert summary["changed"] == 0 and summary["hosts"]["localhost"] == {"preflight": "ok"}
