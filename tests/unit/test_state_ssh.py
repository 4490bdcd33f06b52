"""The controller's lock over real SSH: a throwaway sshd on loopback (tests/sshd_fixture.py).

Two takers from two state dirs, each with its own SSH connection: one wins, the other exits 3
naming the holder; the lock is freed when the winner's connection closes, and `kiln provision`
itself (a subprocess) is refused while a holder keeps it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sshd_fixture
from kiln.errors import EnvironmentProblem, ExitCode
from kiln.inventory import require_valid
from kiln.state import SharedState, controller, controller_remote, lock_status

pytestmark = pytest.mark.local
sshd = sshd_fixture.sshd  # the module-scoped throwaway sshd fixture
KILN = str(Path(sys.executable).parent / "kiln")


@pytest.fixture
def cluster(sshd, tmp_path):
    """Controller ctl01 and one node over the sshd; the state directory under tmp_path."""
    inventory = sshd.write_inventory(tmp_path, {"ctl01": "127.0.0.2", "gpu001": "127.0.0.3"})
    with (inventory / "group_vars" / "all.yml").open("a") as extra:
        extra.write(f"kiln_state:\n  backend: controller\n  path: {tmp_path / 'ctl-state'}\n")
    return require_valid(inventory)


def test_two_takers_over_ssh_one_wins_the_other_exits_3(cluster, tmp_path):
    first = SharedState(cluster, run_id="RUN-A", home=tmp_path / "runner-a")
    first.acquire()
    try:
        assert first.backend == "controller"
        assert "ctl01" in first.notes[0] and "127.0.0.2" in first.notes[0]
        second = SharedState(cluster, run_id="RUN-B", home=tmp_path / "runner-b")
        with pytest.raises(EnvironmentProblem) as refused:
            second.acquire()
        assert refused.value.exit_code == ExitCode.ENVIRONMENT
        assert (
            "run RUN-A" in refused.value.message and f"pid {os.getpid()}" in refused.value.message
        )
        status = lock_status(cluster, tmp_path / "runner-b")
        assert status.reachable and status.controller.run_id == "RUN-A"
    finally:
        first.remote.close()  # the connection drops, as when kiln dies: no release() sent
        first.release()
    remote = controller_remote(cluster)
    try:
        deadline = time.monotonic() + 10
        while controller.probe(remote, cluster.state.path) is not None:
            assert time.monotonic() < deadline, "the lock outlived its SSH connection"
            time.sleep(0.1)
    finally:
        remote.close()
    with SharedState(cluster, run_id="RUN-B", home=tmp_path / "runner-b") as second:
        assert second.info.run_id == "RUN-B"


def test_provision_from_another_state_dir_exits_3_naming_the_holder(cluster, tmp_path):
    with SharedState(cluster, run_id="HOLDER", home=tmp_path / "runner-a"):
        proc = subprocess.run(
            [KILN, "provision", str(cluster.inventory_dir), "--stages", "base", "--yes"],
            capture_output=True,
            text=True,
            env={**os.environ, "KILN_HOME": str(tmp_path / "runner-b")},
            timeout=120,
            check=False,
        )
    assert proc.returncode == 3, proc.stderr
    assert "run HOLDER" in proc.stderr and "ctl01" in proc.stderr
    assert not (tmp_path / "runner-b" / "runs").exists()  # nothing ran
