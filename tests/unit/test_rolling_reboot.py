"""A rolling step that reboots, through real ansible-playbook over SSH to a throwaway sshd.

The reboot is Ansible's own reboot action, which refuses a local connection, so the hosts are
loopback addresses of a throwaway sshd (tests/sshd_fixture.py). The only stand-ins are the
`shutdown` it finds (search_paths, set through module_defaults) and the boot id it reads
(boot_time_command): a node that "comes back" gets a new boot id from the stand-in shutdown; a
lost one never does, and Ansible's reboot times out exactly as it does for a node that never
answers again. Slurm on the controller is the stand-in of tests/slurm_doubles.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sshd_fixture
from slurm_doubles import install_doubles, node, updates

pytestmark = pytest.mark.local
sshd = sshd_fixture.sshd  # the module-scoped throwaway sshd fixture

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
RUN_ID = "20261201T100000Z-1d1d1d"
OURS = f"kiln:maintenance:{RUN_ID}: test change 1 -> 2"
SHUTDOWN = """#!/bin/sh
# Stand-in for shutdown -r: a node that comes back boots with a new boot id; a lost one never.
echo "$@" >> STATE/shutdown.log
if [ -e STATE/comes-back ]; then cat /proc/sys/kernel/random/uuid > STATE/boot_id; fi
"""


def rollout(tmp_path: Path, sshd, *, comes_back: bool) -> tuple[subprocess.CompletedProcess, Path]:
    state, bin_dir = tmp_path / "state", tmp_path / "bin"
    install_doubles(state, bin_dir, {"n01": {"state": "IDLE"}, "n02": {"state": "IDLE"}})
    (state / "boot_id").write_text("boot-0\n")
    if comes_back:
        (state / "comes-back").touch()
    (bin_dir / "shutdown").write_text(SHUTDOWN.replace("STATE", str(state)))
    (bin_dir / "shutdown").chmod(0o755)
    (tmp_path / "apply.yml").write_text(
        "- name: The change\n"
        "  ansible.builtin.shell: echo {{ inventory_hostname }} >> " + str(state / "applied") + "\n"
        "  changed_when: true\n"
    )
    play = [{
        "name": "A rolling change that reboots, in batches of one",
        "hosts": "kiln_compute",
        "gather_facts": False,
        "serial": 1,
        "max_fail_percentage": 0,
        "environment": {
            "PATH": f"{bin_dir}:/usr/bin:/bin:/usr/sbin:/sbin",
            "KILN_FAKE_SLURM": str(state),
        },
        "module_defaults": {"ansible.builtin.reboot": {
            "search_paths": [str(bin_dir)], "boot_time_command": f"cat {state / 'boot_id'}",
        }},
        "tasks": [{
            "name": "Roll the change",
            "ansible.builtin.include_role": {"name": "slurm_maintenance",
                                             "tasks_from": "rolling"},
            "vars": {
                "slurm_maintenance_change": "test change 1 -> 2",
                "slurm_maintenance_apply": str(tmp_path / "apply.yml"),
                "slurm_maintenance_reboot": True,
                "slurm_maintenance_reboot_timeout_s": 6,
                "slurm_maintenance_timeout_s": 5,
                "slurm_maintenance_poll_s": 1,
            },
        }],
    }]  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps(play))
    python = {"ansible_python_interpreter": sys.executable}
    inventory = sshd.write_inventory(
        tmp_path / "cluster",
        {"ctl": "127.0.0.2", "n01": "127.0.0.3", "n02": "127.0.0.4"},
        hostvars=dict.fromkeys(("ctl", "n01", "n02"), python),
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "cli"),
        "ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(PLAYBOOKS / "filter_plugins"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_PIPELINING": "1",  # fewer SSH round trips per task
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         str(tmp_path / "play.yml"), "-e", f"kiln_run_id={RUN_ID}"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    return done, state


def applied(state: Path) -> list[str]:
    path = state / "applied"
    return path.read_text().split() if path.exists() else []


def test_a_node_lost_after_the_reboot_stays_drained_and_stops_the_rollout(sshd, tmp_path):
    done, state = rollout(tmp_path, sshd, comes_back=False)
    out = done.stdout
    assert done.returncode != 0, out[-5000:]
    assert (
        f"n01 lost after reboot: did not come back within 6 s (test change 1 -> 2); "
        f"left drained ({OURS})"
    ) in out, out[-3000:]
    # Lost: drained with the change's reason, never resumed; the reboot was really asked for.
    assert node(state, "n01") == {"state": "IDLE+DRAIN", "reason": OURS}
    assert (state / "shutdown.log").read_text().startswith("-r ")
    # Failed, it counts against max_fail_percentage 0: the next batch (n02) is never touched.
    assert applied(state) == ["n01"]
    assert [u[1] for u in updates(state)] == ["nodename=n01"]
    assert node(state, "n02") == {"state": "IDLE"}


def test_batches_are_drained_changed_rebooted_and_resumed_one_after_the_other(sshd, tmp_path):
    done, state = rollout(tmp_path, sshd, comes_back=True)
    out = done.stdout
    assert done.returncode == 0, out[-5000:]
    assert applied(state) == ["n01", "n02"]
    # Batch 1 (n01) is drained and resumed before batch 2 (n02) is drained.
    assert [u[1:3] for u in updates(state)] == [
        ["nodename=n01", "state=drain"], ["nodename=n01", "state=resume"],
        ["nodename=n02", "state=drain"], ["nodename=n02", "state=resume"],
    ]  # fmt: skip
    assert node(state, "n01") == node(state, "n02") == {"state": "IDLE", "reason": ""}
    assert len((state / "shutdown.log").read_text().splitlines()) == 2
