"""The disruption budget across shards: at most `batch_size` nodes (or its percentage of the
stage) out of service for kiln's rolling changes at once, over every shard together.

Shards are separate ansible-playbook processes, so the budget is kept where all of them meet:
Slurm, under a lock on the controller (playbooks/roles/slurm_maintenance/files/budget.sh). The
script runs here for real (bash, flock) against the Slurm stand-ins of tests/slurm_doubles.py
plus an `sinfo` that prints `%N|%T|%E` from the same node states; the `local` tests run the role
through real ansible-playbook, two processes at once as two shards of one run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kiln.inventory import require_valid
from kiln.inventory.batches import disruption_budget
from kiln.plan import PlanOptions, make_plan
from slurm_doubles import install_doubles, node, updates

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "playbooks/roles/slurm_maintenance/files/budget.sh"
RUN = "20261201T090000Z-0c0c0c"
EARLIER = "20261130T080000Z-aa11bb"


def ours(change: str = "nccl 2.21.5 -> 2.23.4", run: str = RUN) -> str:
    return f"kiln:maintenance:{run}: {change}"


# `sinfo --noheader --Node --format=%N|%T|%E` over the stand-in's node files: one line per node
# and partition, as Slurm prints it (a node in two partitions is listed twice; the state as sinfo
# words it: IDLE+DRAIN is "drained", ALLOCATED+DRAIN "draining"), "none" for a node with no
# reason. KILN_FAKE_SINFO_DELAY widens the window between reading and draining.
SINFO = r"""#!PYTHON
import json, os, pathlib, sys, time

state = pathlib.Path(os.environ["KILN_FAKE_SLURM"])
if (state / "down").exists():
    sys.stderr.write("slurm_load_partitions: Unable to contact slurm controller "
                     "(connect failure)\n")
    sys.exit(1)
assert sys.argv[1:] == ["--noheader", "--Node", "--format=%N|%T|%E"], sys.argv


def sinfo_state(scontrol):
    base, *flags = scontrol.upper().split("+")
    if "DRAIN" in flags:
        return "drained" if base in ("IDLE", "DOWN") else "draining"
    return base.lower()

for path in sorted(state.iterdir()):
    try:
        node = json.loads(path.read_text())
    except ValueError:
        continue
    if isinstance(node, dict) and "state" in node:
        for _ in range(node.get("partitions", 1)):
            print("%s|%s|%s" % (path.name, sinfo_state(node["state"]),
                                node.get("reason") or "none"))
time.sleep(float(os.environ.get("KILN_FAKE_SINFO_DELAY", "0")))
"""


def slurm(tmp_path: Path, nodes: dict[str, dict]) -> tuple[Path, dict]:
    state, bin_dir = tmp_path / "state", tmp_path / "bin"
    install_doubles(state, bin_dir, nodes)
    (state / "calls.log").touch()  # no scontrol call yet
    (bin_dir / "sinfo").write_text(SINFO.replace("PYTHON", sys.executable, 1))
    (bin_dir / "sinfo").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KILN_FAKE_SLURM": str(state)}
    return state, env


def take(env: dict, budget: int, *pairs: str, tmp: Path, run: str = RUN):
    """budget.sh as the role runs it; returns (rc, {word: [node, ...]})."""
    argv = ["bash", "-c", SCRIPT.read_text(), "kiln-budget", str(tmp / "budget"), str(budget),
            run, *pairs]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=60)
    said: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        _, word, rest = line.split(" ", 2)
        said.setdefault(word, []).append(rest if word == "error" else rest.split(" ", 1)[0])
    return proc.returncode, said


def test_nodes_are_drained_when_they_fit_beside_the_maintenance_drains(tmp_path):
    state, env = slurm(tmp_path, {
        "n01": {"state": "IDLE+DRAIN", "reason": ours()},  # this run, at work: one slot
        "n02": {"state": "IDLE+DRAIN", "reason": "kiln:burnin:x: gemm"},  # not maintenance
        "n03": {"state": "IDLE"},
        "n04": {"state": "IDLE"},
    })  # fmt: skip
    rc, said = take(env, 3, "n03", ours(), "n04", ours("other change"), tmp=tmp_path)
    assert (rc, said) == (0, {"drained": ["n03", "n04"]})
    assert node(state, "n03") == {"state": "IDLE+DRAIN", "reason": ours()}
    assert node(state, "n04") == {"state": "IDLE+DRAIN", "reason": ours("other change")}


def test_a_resumed_node_that_kept_its_reason_holds_no_slot(tmp_path):
    """Slurm 23.11+ keeps a resumed node's last reason (Debian 13's 24.11 showed a node "idle"
    with kiln:maintenance:... after kiln resumed it): only a node out of service holds a slot."""
    state, env = slurm(tmp_path, {
        "n01": {"state": "IDLE", "reason": ours(run=EARLIER)},  # resumed; the reason stayed
        "n02": {"state": "MIXED+DRAIN", "reason": ours()},  # draining for this run: a slot
        "n03": {"state": "IDLE"},
    })  # fmt: skip
    rc, said = take(env, 2, "n03", ours(), tmp=tmp_path)
    assert (rc, said) == (0, {"drained": ["n03"]})
    assert node(state, "n03") == {"state": "IDLE+DRAIN", "reason": ours()}
    rc, said = take(env, 1, "n01", ours(), tmp=tmp_path)  # n02 and n03 fill a budget of one
    assert rc == 75 and said == {"held": ["n02", "n03"]}


def test_a_batch_is_drained_whole_or_not_at_all_and_waits_for_this_runs_nodes(tmp_path):
    state, env = slurm(tmp_path, {
        "n01": {"state": "IDLE+DRAIN", "reason": ours(), "partitions": 2},  # listed twice
        "n02": {"state": "IDLE"},
        "n03": {"state": "IDLE"},
    })  # fmt: skip
    # Budget 2, one held: room for one node, but the batch is two: none is drained.
    rc, said = take(env, 2, "n02", ours(), "n03", ours(), tmp=tmp_path)
    assert (rc, said) == (75, {"held": ["n01"]})
    assert updates(state) == []
    # Once n01 is back in service its slot is free: Slurm's reason is the slot.
    (state / "n01").write_text(json.dumps({"state": "IDLE", "reason": ""}))
    rc, said = take(env, 2, "n02", ours(), "n03", ours(), tmp=tmp_path)
    assert (rc, said) == (0, {"drained": ["n02", "n03"]})


def test_drains_that_stay_fill_the_budget_and_nothing_waits_for_them(tmp_path):
    """A node an earlier (killed or failed) run left drained is still out of service: it holds
    its slot until someone resumes it, so the run fails at once instead of waiting; so does a
    node this run left drained after a failure (its note under DIR/left)."""
    state, env = slurm(tmp_path, {
        "n01": {"state": "IDLE+DRAIN", "reason": ours(run=EARLIER)},
        "n02": {"state": "IDLE"},
    })  # fmt: skip
    assert take(env, 1, "n02", ours(), tmp=tmp_path) == (76, {"stays": ["n01"]})
    (state / "n01").write_text(json.dumps({"state": "IDLE+DRAIN", "reason": ours()}))
    assert take(env, 1, "n02", ours(), tmp=tmp_path) == (75, {"held": ["n01"]})
    (tmp_path / "budget" / "left" / "n01").write_text(ours() + "\n")
    assert take(env, 1, "n02", ours(), tmp=tmp_path) == (76, {"stays": ["n01"]})
    # The note names the drain it was written for: a later drain of n01 is waited for again.
    (state / "n01").write_text(json.dumps({"state": "IDLE+DRAIN", "reason": ours("again")}))
    assert take(env, 1, "n02", ours(), tmp=tmp_path) == (75, {"held": ["n01"]})
    assert updates(state) == [] and node(state, "n02") == {"state": "IDLE"}


def test_budget_zero_is_no_budget_and_slurm_down_drains_nothing(tmp_path):
    state, env = slurm(tmp_path, {"n01": {"state": "IDLE+DRAIN", "reason": ours()},
                                  "n02": {"state": "IDLE"}})  # fmt: skip
    assert take(env, 0, "n02", ours(), tmp=tmp_path) == (0, {"drained": ["n02"]})
    (state / "n02").write_text(json.dumps({"state": "IDLE"}))
    (state / "down").touch()
    rc, said = take(env, 0, "n02", ours(), tmp=tmp_path)
    assert rc == 1 and said["error"][0].startswith("sinfo: slurm_load_partitions: Unable")
    assert node(state, "n02") == {"state": "IDLE"}


def test_shards_asking_at_the_same_moment_never_exceed_the_budget(tmp_path):
    """Eight shards ask at once for one node each, with budget 1 and a slow sinfo (0.2 s between
    counting and draining): the lock lets exactly one drain; the others are told to wait."""
    nodes = {f"n{i:02d}": {"state": "IDLE"} for i in range(1, 9)}
    state, env = slurm(tmp_path, nodes)
    env["KILN_FAKE_SINFO_DELAY"] = "0.2"
    results: dict[str, tuple] = {}

    def shard(name: str) -> None:
        results[name] = take(env, 1, name, ours(), tmp=tmp_path)

    threads = [threading.Thread(target=shard, args=(name,)) for name in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    drained = [name for name, (rc, _) in results.items() if rc == 0]
    assert len(drained) == 1, results
    assert sorted(rc for rc, _ in results.values()) == [0] + [75] * 7
    assert [n for n in nodes if node(state, n)["state"] == "IDLE+DRAIN"] == drained


# --- the figure: kiln plan and what the runner passes ---------------------------------------


def test_the_budget_is_the_batch_size_or_its_share_of_the_stage():
    assert disruption_budget("1", 1500) == 1
    assert disruption_budget("8", 3) == 3
    assert disruption_budget("10%", 1500) == 150  # of the stage, not of each shard
    assert disruption_budget("10%", 5) == 1


def test_plan_says_batches_per_shard_and_the_budget_over_all_shards(tmp_path):
    """Three shards of 4 nodes in batches of 1: 12 batches in all, three running at once, yet
    at most one node out of service at a time."""
    from kiln.examples import write_example

    write_example(tmp_path, 12)
    options = PlanOptions(batch_size="1", shard_by="count", shard_size=4)
    plan = make_plan(require_valid(tmp_path), options, home=tmp_path / "s")
    nccl = next(stage for stage in plan.stages if stage.name == "nccl")
    rolling = plan.rolling(nccl)
    assert rolling is not None
    assert (rolling.shards, rolling.batches, rolling.largest_batch, rolling.budget) == (3, 12, 1, 1)
    assert plan.disruption_budget("nccl") == 1
    assert rolling.describe().startswith(
        "12 batch(es) of up to 1 in 3 shard(s); at most 1 node(s) out of service at once over "
        "all shards;"
    )
    # 25%: each shard's batches are a quarter of its 4 nodes, the budget a quarter of all 12.
    plan = make_plan(
        require_valid(tmp_path),
        PlanOptions(batch_size="25%", shard_by="count", shard_size=4),
        home=tmp_path / "s",
    )
    nccl = next(stage for stage in plan.stages if stage.name == "nccl")
    rolling = plan.rolling(nccl)
    assert rolling is not None
    got = rolling.to_dict()
    keys = ("batches", "largest_batch", "shards", "disruption_budget")
    assert {key: got[key] for key in keys} == {
        "batches": 12, "largest_batch": 1, "shards": 3, "disruption_budget": 3,
    }  # fmt: skip


# --- the role through real ansible-playbook: two shards of one run at once ----------------------

APPLY = """\
- name: Note which nodes Slurm shows drained for maintenance while this one is changed
  ansible.builtin.shell: >-
    echo "{{ inventory_hostname }} $(sinfo --noheader --Node --format='%N|%T|%E'
    | grep -E '^[^|]+[|]drain[a-z]*[|]kiln:maintenance:' | cut -d'|' -f1 | sort -u
    | tr '\\n' ' ')" >> LOG; sleep 2
  changed_when: true
"""
CHECK = """\
- name: Fail the check on a node the test marked
  ansible.builtin.fail:
    msg: test check failed on {{ inventory_hostname }}
  when: ('STATE/fail-' ~ inventory_hostname) is exists
"""


def shards_setup(tmp_path: Path, hosts: list[str]) -> tuple[Path, dict, list[str]]:
    if not (Path(sys.executable).parent / "ansible-playbook").exists():
        pytest.skip("ansible-playbook is not installed beside python")
    state, env = slurm(tmp_path, {host: {"state": "IDLE"} for host in hosts})
    log = tmp_path / "seen.log"
    (tmp_path / "apply.yml").write_text(APPLY.replace("LOG", str(log)))
    (tmp_path / "check.yml").write_text(CHECK.replace("STATE", str(state)))
    play = [{
        "name": "A rolling change, one shard of a run",
        "hosts": "kiln_compute",
        "gather_facts": False,
        "serial": "{{ kiln_batch_size }}",
        "max_fail_percentage": 0,
        "environment": {"PATH": env["PATH"], "KILN_FAKE_SLURM": str(state)},
        "tasks": [{
            "name": "Roll the change",
            "ansible.builtin.include_role": {"name": "slurm_maintenance", "tasks_from": "rolling"},
            "vars": {
                "slurm_maintenance_change": "test change",
                "slurm_maintenance_apply": str(tmp_path / "apply.yml"),
                "slurm_maintenance_validate": str(tmp_path / "check.yml"),
                "slurm_maintenance_timeout_s": 5,
                "slurm_maintenance_poll_s": 1,
                "slurm_maintenance_budget_wait_s": 600,
                "slurm_maintenance_budget_dir": str(tmp_path / "budget"),
            },
        }],
    }]  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps(play))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"vars": local, "children": {
        "kiln_controllers": {"hosts": {"ctl": {}}},
        "kiln_compute": {"hosts": dict.fromkeys(hosts, {})},
    }}}  # fmt: skip
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    argv = [playbook, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
            "-f", "10", "-e", f"kiln_run_id={RUN}"]  # fmt: skip
    env |= {
        "PYTHONPATH": str(ROOT / "cli"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "playbooks" / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(ROOT / "playbooks" / "filter_plugins"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_NOCOLOR": "1",
    }
    return state, env, argv


def start(argv: list[str], env: dict, shard: list[str], batch: int, budget: int):
    extra = ["--limit", ",".join(shard), "-e", f"kiln_batch_size={batch}",
             "-e", f"kiln_disruption_budget={budget}"]  # fmt: skip
    return subprocess.Popen([*argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)  # fmt: skip


def seen(tmp_path: Path) -> list[tuple[str, set[str]]]:
    """(the node being changed, the nodes Slurm showed drained for maintenance meanwhile)."""
    lines = (tmp_path / "seen.log").read_text().splitlines()
    return [(line.split()[0], set(line.split()[1:])) for line in lines]


@pytest.mark.local
def test_two_shards_at_once_keep_to_the_budget_a_batch_drained_together(tmp_path):
    """Two shards of two nodes in batches of two, budget 2: each shard's batch is drained,
    changed and resumed whole, and while one shard's batch is out the other waits: never more
    than two nodes drained, and never a mix of the two shards (a half-drained batch would hold
    its slots while it waited for the other shard's)."""
    one, two = ["n01", "n02"], ["n03", "n04"]
    state, env, argv = shards_setup(tmp_path, one + two)
    procs = [start(argv, env, shard, 2, 2) for shard in (one, two)]
    outs = [proc.communicate(timeout=300)[0] for proc in procs]
    for proc, out in zip(procs, outs, strict=True):
        assert proc.returncode == 0, out[-4000:]
    changes = seen(tmp_path)
    assert sorted(host for host, _ in changes) == one + two  # every node changed once
    for host, drained in changes:
        mine = set(one) if host in one else set(two)
        assert drained == mine, changes  # its whole batch, and nothing of the other shard
    for host in one + two:
        assert node(state, host) == {"state": "IDLE", "reason": ""}
        drains = [u for u in updates(state) if u[1] == f"nodename={host}" and u[2] == "state=drain"]
        assert len(drains) == 1 and drains[0][3] == f"reason={ours('test change')}"


@pytest.mark.local
def test_a_node_another_shard_left_drained_after_a_failure_is_not_waited_for(tmp_path):
    """Budget 1: n01's check fails, so n01 stays drained (its slot stays taken: it is out of
    service) and its shard stops. n02, in the other shard, was waiting for that slot: it fails
    at once, neither drained nor changed, naming n01, instead of waiting out its 600 s."""
    state, env, argv = shards_setup(tmp_path, ["n01", "n02"])
    (state / "fail-n01").touch()
    first = start(argv, env, ["n01"], 1, 1)
    deadline = time.monotonic() + 120
    while node(state, "n01")["state"] != "IDLE+DRAIN":  # n01 holds the budget
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()[0]
        time.sleep(0.2)
    began = time.monotonic()
    second = start(argv, env, ["n02"], 1, 1)
    out_one, out_two = first.communicate(timeout=300)[0], second.communicate(timeout=300)[0]
    assert first.returncode != 0 and second.returncode != 0
    assert f"n01: the check after test change failed, left drained ({ours('test change')})" in (
        out_one
    )
    assert (
        "n02 is neither drained nor changed: the disruption budget (1 node(s) out of service at "
        "once over every shard) is held by drains that stay: "
        f"n01 ({ours('test change')}); check those nodes"
    ) in " ".join(out_two.split()), out_two[-4000:]
    assert time.monotonic() - began < 120  # not the 600 s wait
    assert node(state, "n01") == {"state": "IDLE+DRAIN", "reason": ours("test change")}
    assert node(state, "n02") == {"state": "IDLE"}
    assert [host for host, _ in seen(tmp_path)] == ["n01"]
