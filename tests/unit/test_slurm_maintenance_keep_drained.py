"""slurm_maintenance's keep_drained, as nvidia_driver calls it when the DCGM check after a driver
upgrade did not validate the node (no dcgmi, no host engine, a failure): the node stays drained
and its reason says why, instead of "work in progress"; only this run's unchanged drain is
rewritten. Real ansible-playbook over local hosts; the controller's `scontrol` and `squeue` are
the stand-ins of tests/slurm_doubles.py, replaying the recorded real `scontrol show node`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurm_doubles import calls, install_doubles, local_inventory, node, role_playbook

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
RUN_ID = "20261201T120000Z-5e5e5e"
OURS = f"kiln:maintenance:{RUN_ID}: maintenance"
WHY = "driver upgrade 535.183.06 -> 550.127.05: dcgm r1 not validated: dcgmi is not installed"
KEPT = f"kiln:maintenance:{RUN_ID}: {WHY}"
BURNIN = "kiln:burnin:20261129T080000Z-aa11bb: gemm gpu3 612 TFLOPS < floor 700"
OPERATOR = "kiln:operator:alice: disk swap"

PLAY = [
    {
        "name": "A driver upgrade whose DCGM check did not validate the node",
        "hosts": "kiln_compute",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Drain and wait for jobs",
                "ansible.builtin.include_role": {"name": "slurm_maintenance",
                                                 "tasks_from": "drain"},
                "vars": {"slurm_maintenance_timeout_s": 5, "slurm_maintenance_poll_s": 1},
            },
            {
                "name": "An operator drains n03 while the upgrade runs",
                "ansible.builtin.command": {"argv": ["scontrol", "update", "nodename=n03",
                                                     "state=drain", f"reason={OPERATOR}"]},
                "when": "inventory_hostname == 'n03'",
            },
            {
                "name": "Keep the node drained, saying why",
                "ansible.builtin.include_role": {"name": "slurm_maintenance",
                                                 "tasks_from": "keep_drained"},
                "vars": {"slurm_maintenance_kept_reason":
                         "{{ 'maintenance' | kiln_drain_reason(kiln_run_id, why=kept_why) }}"},
            },
            {
                "name": "Say what the failure message would",
                "ansible.builtin.debug": {
                    "msg": "LEFT {{ __slurm_maintenance_placed | default('none') }}"},
            },
        ],
    }
]  # fmt: skip

NODES = {
    "n01": {"state": "IDLE"},  # drained by this run, kept drained with the reason why
    "n02": {"state": "IDLE+DRAIN", "reason": BURNIN},  # not this run's drain: left alone
    "n03": {"state": "IDLE"},  # drained by this run, then by an operator: the operator's stays
}


def play(tmp_path: Path, controllers: dict) -> subprocess.CompletedProcess:
    """The play over NODES, with `controllers` as kiln_controllers' hosts."""
    if not (Path(sys.executable).parent / "ansible-playbook").exists():
        pytest.skip("ansible-playbook is not installed beside python")
    state, bin_dir = tmp_path / "slurm", tmp_path / "bin"
    install_doubles(state, bin_dir, NODES)
    inventory = local_inventory(NODES, controllers, kept_why=WHY)
    argv, env = role_playbook(
        tmp_path, inventory, PLAY, state=state, bin_dir=bin_dir, run_id=RUN_ID
    )
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_an_unvalidated_node_stays_drained_with_the_reason_why(tmp_path):
    state = tmp_path / "slurm"
    done = play(tmp_path, {"ctl": None})
    assert done.returncode == 0, done.stdout[-4000:]

    # n01: drained by this run, never resumed, its reason now says why it stays out.
    assert node(state, "n01") == {"state": "IDLE+DRAIN", "reason": KEPT}
    # n02's burn-in drain and the operator's drain of n03 are kept as they are.
    assert node(state, "n02") == NODES["n02"]
    assert node(state, "n03") == {"state": "IDLE+DRAIN", "reason": OPERATOR}
    per_node: dict[str, list[str]] = {}
    for args in calls(state):
        if args[0] == "update":
            per_node.setdefault(args[1], []).append(" ".join(args[2:]))
    assert per_node == {  # in order, per node; n02 is never updated
        "nodename=n01": [f"state=drain reason={OURS}", f"state=drain reason={KEPT}"],
        "nodename=n03": [f"state=drain reason={OURS}", f"state=drain reason={OPERATOR}"],
    }
    assert not any("state=resume" in a for a in calls(state))
    # What the caller's failure message says the node was left with.
    assert f'"msg": "LEFT {KEPT}"' in done.stdout


def test_without_a_controller_there_is_no_slurm_to_touch(tmp_path):
    """A cluster being built, or molecule/nvidia: no kiln_controllers, so neither the drain nor
    keep_drained asks Slurm anything (the empty controller is never a delegate_to)."""
    done = play(tmp_path, {})
    assert done.returncode == 0, done.stdout[-4000:]
    state = tmp_path / "slurm"
    # only the play's own operator step calls scontrol; the role asks nothing
    assert calls(state) == [["update", "nodename=n03", "state=drain", f"reason={OPERATOR}"]]
    assert node(state, "n01") == NODES["n01"]
    assert done.stdout.count('"msg": "LEFT none"') == len(NODES)
