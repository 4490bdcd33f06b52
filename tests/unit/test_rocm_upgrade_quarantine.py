"""The rocm role's upgrade in Slurm: the node is drained (kind maintenance) before its ROCm moves,
and after it the drain becomes a quarantine that only a passing burn-in lifts (kiln has no AMD
diagnostic to validate the node, as DCGM does on NVIDIA nodes); another's drain is left alone.
Real ansible-playbook over local hosts running the role's own upgrade task files; the
controller's `scontrol` and `squeue` are the stand-ins of tests/slurm_doubles.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kiln.parsers.drain_reason import may_lift
from slurm_doubles import calls, install_doubles, local_inventory, node, role_playbook

pytestmark = pytest.mark.local

RUN_ID = "20261204T050000Z-a1d0c3"
DRAINED = f"kiln:maintenance:{RUN_ID}: rocm upgrade 6.2.4 -> 6.3.3"
QUARANTINED = (
    f"kiln:quarantine:{RUN_ID}: rocm upgrade 6.2.4 -> 6.3.3, quarantined until burn-in passes"
)
OPERATOR = "kiln:operator:alice: disk swap"
NODES = {
    "m01": {"state": "IDLE"},  # upgraded: drained, then quarantined
    "m02": {"state": "IDLE+DRAIN", "reason": OPERATOR},  # an operator's drain: never touched
}
PLAY = [
    {
        "name": "The rocm role's upgrade steps around the package work",
        "hosts": "kiln_compute",
        "gather_facts": False,
        "vars": {"rocm_release": "6.3.3", "slurm_maintenance_poll_s": 1},
        "tasks": [
            {"name": "The plan the role made", "ansible.builtin.set_fact": {
                "__rocm_plan": {"action": "upgrade", "installed": "6.2.4", "packages": []}}},
            {"name": "Drain", "ansible.builtin.include_role": {
                "name": "rocm", "tasks_from": "upgrade_drain"}},
            {"name": "Quarantine", "ansible.builtin.include_role": {
                "name": "rocm", "tasks_from": "upgrade_quarantine"}},
        ],
    }
]  # fmt: skip


def test_an_upgraded_node_is_quarantined_until_burn_in_and_an_operators_drain_kept(tmp_path):
    if not (Path(sys.executable).parent / "ansible-playbook").exists():
        pytest.skip("ansible-playbook is not installed beside python")
    state, bin_dir = tmp_path / "slurm", tmp_path / "bin"
    install_doubles(state, bin_dir, NODES)
    inventory = local_inventory(NODES, {"ctl": None})
    argv, env = role_playbook(
        tmp_path, inventory, PLAY, state=state, bin_dir=bin_dir, run_id=RUN_ID
    )
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:]
    updates = [" ".join(a[1:]) for a in calls(state) if a[0] == "update"]
    assert updates == [
        f"nodename=m01 state=drain reason={DRAINED}",
        f"nodename=m01 state=drain reason={QUARANTINED}",
    ]
    assert node(state, "m01") == {"state": "IDLE+DRAIN", "reason": QUARANTINED}
    assert node(state, "m02") == NODES["m02"]
    # only a passing burn-in returns it; the provision run that upgraded it may not
    assert may_lift(QUARANTINED, "burnin") and not may_lift(QUARANTINED, "maintenance")
