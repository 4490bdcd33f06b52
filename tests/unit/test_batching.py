"""kiln's batched-worker strategies give the same results as Ansible's linear strategy.

Real ansible-playbook runs over local hosts: the same play under `linear`, `kiln_linear` and
(where mitogen is installed) `kiln_mitogen_linear`, compared host by host and task by task
through the ansible.posix.json callback.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.runner import engine

pytestmark = pytest.mark.local

HOSTS = [f"n{i}" for i in range(7)]

# Registered values, loops, a host that fails and drops out, ignore_errors, a dynamic include,
# run_once, delegation (which rewrites the play context), handlers, a per-host `when`, and two
# serial batches: everything a worker's copy of the task and play context must not leak across.
PLAY = """
- hosts: all
  gather_facts: false
  serial: 4
  max_fail_percentage: 50
  tasks:
    - name: register a per-host value
      ansible.builtin.set_fact:
        tag: "{{ inventory_hostname }}-{{ ansible_play_batch | length }}"
    - name: loop over items
      ansible.builtin.debug:
        msg: "{{ tag }} {{ item }}"
      loop: [a, b]
    - name: one host fails
      ansible.builtin.fail:
        msg: "{{ inventory_hostname }} fails"
      when: inventory_hostname == "n2"
    - name: failure ignored
      ansible.builtin.fail:
        msg: ignored
      ignore_errors: true
      when: inventory_hostname == "n5"
    - name: dynamic include
      ansible.builtin.include_tasks: included.yml
    - name: once per batch
      ansible.builtin.set_fact:
        once: "{{ inventory_hostname }}"
      run_once: true
    - name: delegated
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }} via {{ ansible_host | default('none') }}"
      delegate_to: "{{ ansible_play_batch[0] }}"
    - name: notify
      ansible.builtin.debug:
        msg: notify
      changed_when: true
      notify: handled
  handlers:
    - name: handled
      ansible.builtin.debug:
        msg: "handler on {{ inventory_hostname }} saw {{ tag }}"
"""

INCLUDED = """
- name: included task
  ansible.builtin.debug:
    msg: "included {{ tag }}"
"""

# A host-task's part in the concurrency test: mark itself running, wait until `peers` are running
# (or another host-task saw that, or a generous timeout), then stay a while so that a host-task
# that should not be running yet shows up, and write the most it saw running at once. The peak is
# reached by construction however slow the machine, and more than `peers` at once still shows.
RENDEZVOUS = """
import sys, time
from pathlib import Path

directory, tag, host, peers = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
running, released = directory / f"{tag}-{host}", directory / f"released-{tag}"


def count():
    return len(list(directory.glob(f"{tag}-*")))


running.touch()
most, deadline = count(), time.monotonic() + 60
while most < peers and not released.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
    most = max(most, count())
released.touch()  # the peak was reached (or never will be): later host-tasks do not wait
stay = time.monotonic() + 0.5
while time.monotonic() < stay:
    most = max(most, count())
    time.sleep(0.02)
running.unlink()
(directory / f"seen-{tag}-{host}").write_text(str(most))
"""

CONCURRENCY_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: throttled
      ansible.builtin.command: >-
        {{ ansible_python_interpreter }} {{ rendezvous }} {{ dir }} t {{ inventory_hostname }} 2
      throttle: 2
    - name: at forks
      ansible.builtin.command: >-
        {{ ansible_python_interpreter }} {{ rendezvous }} {{ dir }} f {{ inventory_hostname }} 4
"""


def strategies() -> list[str]:
    names = ["linear", "kiln_linear"]
    if importlib.util.find_spec("ansible_mitogen"):
        names.append("kiln_mitogen_linear")
    return names


def run_play(tmp_path: Path, strategy: str, play: str, forks: int, extra: dict | None = None):
    work = tmp_path / strategy
    work.mkdir()
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                **(extra or {}),
            },
            "hosts": {name: {} for name in HOSTS},
        }
    }
    (work / "hosts.json").write_text(json.dumps(inventory))
    (work / "play.yml").write_text(play)
    (work / "included.yml").write_text(INCLUDED)
    env = {
        **os.environ,
        "ANSIBLE_STRATEGY": strategy,
        "ANSIBLE_STRATEGY_PLUGINS": str(engine.STRATEGY_DIR),
        "ANSIBLE_FORKS": str(forks),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_CONFIG": str(work / "none.cfg"),
    }
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.json", "play.yml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def outcome(document: dict) -> tuple[dict, list]:
    """Per-host stats, and each task's per-host results without timings or ordering.

    The json callback lists a task once per host-task under any strategy but linear (it keys
    "lockstep" on the name), so entries are merged by task id here.
    """
    keep = ("changed", "failed", "skipped", "msg", "ansible_facts", "results", "skip_reason")
    tasks: dict[str, tuple[str, dict]] = {}
    for play in document["plays"]:
        for task in play["tasks"]:
            _, hosts = tasks.setdefault(task["task"]["id"], (task["task"]["name"], {}))
            for host, result in task["hosts"].items():
                hosts[host] = {key: result[key] for key in keep if key in result}
                for item in hosts[host].get("results", []):
                    for key in ("_ansible_item_label", "ansible_loop_var"):
                        item.pop(key, None)
    return document["stats"], list(tasks.values())


@pytest.mark.parametrize("strategy", strategies()[1:])
def test_same_results_as_ansibles_linear_strategy(tmp_path, strategy):
    forks = 3  # fewer than a batch's hosts, so workers run several hosts each
    rc_linear, linear = run_play(tmp_path, "linear", PLAY, forks)
    rc_kiln, kiln = run_play(tmp_path, strategy, PLAY, forks)
    assert rc_kiln == rc_linear == 2  # n2 failed
    linear_stats, linear_tasks = outcome(linear)
    kiln_stats, kiln_tasks = outcome(kiln)
    assert kiln_stats == linear_stats
    assert kiln_tasks == linear_tasks
    # the play really did what the comparison relies on
    assert linear_stats["n2"]["failures"] == 1
    assert linear_stats["n5"]["ignored"] == 1
    handler = next(hosts for name, hosts in linear_tasks if name == "handled")
    assert handler["n6"]["msg"] == "handler on n6 saw n6-3"  # the second batch: 3 hosts
    delegated = next(hosts for name, hosts in linear_tasks if name == "delegated")
    assert set(delegated) == set(HOSTS) - {"n2"}


# A block whose own fields are templated per host. Running a task templates its parent blocks
# too (Task.post_validate), and a worker copies each later host's task with its parent blocks
# but not their task lists: every host must still get its own block's values.
BLOCK_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: a block templated per host
      ignore_errors: "{{ inventory_hostname in ['n1', 'n4'] }}"
      vars:
        per_host: "{{ inventory_hostname }}-block"
      block:
        - name: fails on n1, n3, n4 and n6; n1 and n4 ignore it
          ansible.builtin.fail:
            msg: "{{ per_host }}"
          when: inventory_hostname in ['n1', 'n3', 'n4', 'n6']
        - name: after the failure
          ansible.builtin.debug:
            msg: "{{ per_host }} went on"
"""


@pytest.mark.parametrize("strategy", strategies()[1:])
def test_a_blocks_fields_are_templated_for_each_host(tmp_path, strategy):
    forks = 2  # 7 hosts: workers of 4 and 3 hosts, so hosts after the first use copies
    rc_linear, linear = run_play(tmp_path, "linear", BLOCK_PLAY, forks)
    rc_kiln, kiln = run_play(tmp_path, strategy, BLOCK_PLAY, forks)
    assert rc_kiln == rc_linear == 2
    linear_stats, linear_tasks = outcome(linear)
    assert outcome(kiln) == (linear_stats, linear_tasks)
    assert {h for h, s in linear_stats.items() if s["ignored"]} == {"n1", "n4"}
    assert {h for h, s in linear_stats.items() if s["failures"]} == {"n3", "n6"}
    went_on = next(hosts for name, hosts in linear_tasks if name == "after the failure")
    assert went_on["n4"]["msg"] == "n4-block went on"


@pytest.mark.parametrize("strategy", ["linear", "kiln_linear"])
def test_concurrency_is_forks_or_the_tasks_throttle(tmp_path, strategy):
    seen = tmp_path / f"seen-{strategy}"
    seen.mkdir()
    rendezvous = tmp_path / "rendezvous.py"
    rendezvous.write_text(RENDEZVOUS)
    extra = {"dir": str(seen), "rendezvous": str(rendezvous)}
    rc, _ = run_play(tmp_path, strategy, CONCURRENCY_PLAY, forks=4, extra=extra)
    assert rc == 0

    def peak(prefix: str) -> int:
        return max(int((seen / f"seen-{prefix}-{host}").read_text()) for host in HOSTS)

    assert peak("t") <= 2  # throttle: 2
    assert peak("t") == 2
    # 7 hosts at forks 4: 4 run at once (kiln: 4 workers of 2, 2, 2 and 1 host)
    assert peak("f") == 4
