"""The fleet-scale rehearsal (issue 34): many sandbox nodes brought up end to end by kiln, with
faults injected while it runs, every fault named and nothing else touched.

`make test-scale` runs it on KILN_SCALE_NODES nodes (32 by default; `make test-scale-short`,
CI's case, on 6), each a full sandbox node (systemd, sshd, munge, slurmd), on a sandbox instance
of its own (KILN_SANDBOX=scale):

1. `kiln provision` in shards of a quarter of the nodes (at least 4), rolling batches of 4, a
   failure budget of half a batch (50 %: the two faulty nodes may share one). The compute
   shards run on two worker controllers (the first and last nodes) reached through a Receptor
   mesh (playbooks/receptor.yml, the hub on the controller; where the OS packages Receptor,
   else without workers). While it runs one node hangs (`docker pause` as the base stage
   starts: sshd never answers, as on a hung host), another reboots (`docker restart` as the
   slurm stage starts) and the second worker leaves the mesh while its first shard runs
   (`systemctl stop receptor`: its job lives on, unreachable, as behind a cut link). The hung
   node is named unreachable, every other node is ok (the rebooted one unless the reboot cut a
   task), no shard is stopped; the lost worker's job ended by its lease before its shard ran
   again on the other; `kiln provision --retry-failed` then brings the faulty ones in.
2. `kiln burnin` with one node's CPU throttled during its GEMM (`docker update`) and another
   node's link slowed to 100 Mbit/s with `tc` (netem where the kernel has it, else tbf; from the
   host, in the container's network namespace):
   the first is named by its GEMM against the fleet, the second by the pairwise all-reduce pass,
   each drained with kiln's reason; no other node is drained.
3. The faults cleared, a burn-in passes, resumes both, and every node is idle in Slurm and in
   service in its lifecycle.

Wall time per step is printed: the rehearsal's own figures (docs/scale.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .own_sandbox import own_sandbox
from .worker_hosts import (
    HUB_CONTROL_PORT,
    hub_address,
    install_worker,
    inventory_keys,
    mesh_credentials,
    receptor_packaged,
    set_up_mesh,
)

pytestmark = pytest.mark.scale

KILN = str(Path(sys.executable).parent / "kiln")
INSTANCE = "scale"
NODES = int(os.environ.get("KILN_SCALE_NODES", "32"))
SECONDS = "5"  # GEMM seconds per node
# A healthy node's GEMM on this machine falls with its share of the cores (about 0.0003 TFLOPS
# at 32 nodes on 2 cores): the absolute floor with it, so that only the faults fall below.
GEMM_FLOOR = 0.0001 * min(1.0, 6 / NODES)


def _kiln(env: dict, *args: str, timeout: int = 3600) -> tuple[int, dict, str]:
    proc = subprocess.run([KILN, *args, "--json"], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    assert proc.stdout.strip(), f"kiln {args[0]}: no JSON; stderr:\n{proc.stderr[-4000:]}"
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _docker(*argv: str, check: bool = True) -> str:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, check=check,
                          timeout=300).stdout.strip()  # fmt: skip


def _on_controller(command: str) -> str:
    return _docker("exec", f"{INSTANCE}-ctl", "bash", "-c", command)


def _inventory(source: Path, target: Path, workers: dict | None = None) -> Path:
    """The instance's inventory with the rehearsal's rollout and burn-in settings; `workers`:
    {"hosts": [...], "rollout": {worker_runner, worker_transport, receptor}}."""
    shutil.copytree(source, target)
    shard = max(4, NODES // 4)
    rollout = "".join(
        f"  {k}: {json.dumps(v)}\n" for k, v in (workers or {}).get("rollout", {}).items()
    )
    if workers:
        hosts = target / "hosts.yml"
        listed = "".join(f"        {host}:\n" for host in workers["hosts"])
        hosts.write_text(
            hosts.read_text().rstrip("\n") + "\n    kiln_workers:\n      hosts:\n" + listed
        )
    with (target / "group_vars" / "all.yml").open("a", encoding="utf-8") as handle:
        handle.write(
            "\n# The rehearsal: shards of a quarter of the nodes, rolling batches of 4, and a\n"
            "# failure budget of half a batch (the two faulty nodes may share one).\n"
            f"kiln_rollout:\n  shard_by: count\n  shard_size: {shard}\n  batch_size: 4\n"
            "  max_fail_percentage: 50\n"
            + rollout
            + "# Many nodes on 2 shared cores measure unevenly: the faults injected are six times\n"
            "# slower than a healthy node or more, so a node fails only 75 % below the fleet's\n"
            "# median; the floor falls with each node's share of the cores, and the jobs' time\n"
            "# limit grows with the node count (a ring of 32 ranks, a throttled node's job).\n"
            f"kiln_burnin:\n  gemm_tflops_floor: {GEMM_FLOOR:.7f}\n  node_relative_pct: 75\n"
            f"  time_limit_minutes: {6 + NODES // 8}\n"
        )
    return target


def _wait_for(log: Path, text: str, proc: subprocess.Popen, timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"kiln ended before {text!r}:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {text!r} in {timeout:.0f}s"
        time.sleep(1)


def _leave_mesh_when_busy(worker: str, left: list[str], stop: threading.Event) -> None:
    """Once `worker` runs a shard's job, its Receptor stops (its job lives on, unreachable);
    `left` gets the job's processes as `ps` listed them then."""
    while not stop.is_set():
        found = subprocess.run(
            ["docker", "exec", worker, "pgrep", "-f", "ansible-playbook.*/tmp/kiln-worker/"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if found.returncode == 0:
            _docker("exec", worker, "systemctl", "stop", "receptor")
            left.append(_docker("exec", worker, "ps", "-eo", "pid,args"))
            return
        time.sleep(0.3)


def _provision_with_faults(env: dict, inventory: Path, hung: str, rebooted: str, tmp: Path,
                           lost_worker: str | None = None):  # fmt: skip
    log = tmp / "provision.err"
    left: list[str] = []
    stop = threading.Event()
    if lost_worker:
        threading.Thread(target=_leave_mesh_when_busy, args=(lost_worker, left, stop)).start()
    with log.open("w") as err:
        proc = subprocess.Popen([KILN, "provision", str(inventory), "--yes", "--json"], env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True)  # fmt: skip
        try:
            _wait_for(log, "base: ", proc)
            _docker("pause", hung)  # a hung host: the TCP handshake works, sshd never answers
            _wait_for(log, "slurm: ", proc)
            _docker("restart", "--time", "1", rebooted)
            stdout, _ = proc.communicate(timeout=3600)
        finally:
            stop.set()
            if proc.poll() is None:
                proc.kill()
            subprocess.run(["docker", "unpause", hung], capture_output=True, check=False)
    assert stdout.strip(), log.read_text()[-4000:]
    return proc.returncode, json.loads(stdout), log.read_text(), left


def _workers(inventory_dir: Path, workers: list[str], tmp: Path) -> dict | None:
    """`workers` made worker controllers reached through a Receptor mesh whose hub is the
    controller (None where the OS packages no Receptor: the rehearsal then runs without)."""
    controller = f"{INSTANCE}-ctl"
    if not receptor_packaged(controller):
        print(f"\n{controller}: no receptor package; the rehearsal runs without workers")
        return None
    keys = inventory_keys(inventory_dir)
    runner = ""
    for index, worker in enumerate(workers):
        runner = install_worker(worker, tmp / f"wheels-{index}", keys)
    client = tmp / "receptor"
    socket = f"tls://{hub_address(inventory_dir, controller)}:{HUB_CONTROL_PORT}"
    spec = {"hosts": workers, "rollout": {
        "worker_runner": runner, "worker_transport": "receptor",
        "receptor": {"socket": socket, **mesh_credentials(client)}}}  # fmt: skip
    set_up_mesh(_inventory(inventory_dir, tmp / "mesh-inventory", spec), client)
    return spec


def _assert_lost_worker_fenced(summary: dict, kept: str, lost: str, left: list[str]) -> None:
    """The lost worker's job was left running, died by its lease, and only then did its shard
    run again, on the other worker, which ran every later shard."""
    assert left, f"{lost} never ran a worker job"
    events = Path(summary["record"]) / "events.jsonl"
    losses = [json.loads(line) for line in events.read_text().splitlines()
              if "kiln_worker_lost" in line]  # fmt: skip
    # one loss per shard that had started there before kiln knew (more than one on many nodes)
    assert losses and {(e["worker"], e["job"]) for e in losses} == {(lost, "lease expired")}
    assert all(e["waited_s"] > 0 for e in losses), losses  # kiln waited out the job's lease
    shards = [s for e in summary["stages"] for s in e["shards"] if s["name"] != "controllers"]
    moved = [s for s in shards if s.get("requeued_from")]
    assert len(moved) == len(losses), (moved, losses)
    assert all(s["requeued_from"] == [lost] and s["worker"] == kept for s in moved), moved
    after = shards[shards.index(moved[-1]) + 1 :]
    assert all(s["worker"] == kept for s in after), after  # a lost worker takes no more
    remaining = _docker("exec", lost, "pgrep", "-f", "/tmp/kiln-worker/", check=False)
    assert not remaining, remaining  # its job is gone (killed by its own lease)


def _container_pid(name: str) -> str:
    return _docker("inspect", "--format", "{{.State.Pid}}", name)


# The slow link's rate: 100 Mbit/s up to 12 nodes, lower beyond. Pairs share this machine's
# cores, so a healthy pair's rate falls with the node count (about 300 Mbit/s at 32 nodes on 2
# cores, where 100 Mbit/s was only a third of it): the link stays an eighth of a healthy pair.
SHAPED_MBIT = min(100, 1200 // NODES)


def _slow_link(name: str, add: bool) -> str:
    """A slow link on node `name`: its eth0 shaped from the host, in its network namespace;
    which shaper did it. netem (delay and rate) where the kernel has it, else a token bucket
    (tbf: the rate alone; this machine's Firecracker kernel has no sch_netem)."""
    tc = ["nsenter", "-t", _container_pid(name), "-n", "tc", "qdisc"]
    if not add:
        subprocess.run([*tc, "del", "dev", "eth0", "root"], check=True, capture_output=True)
        return ""
    rate = f"{SHAPED_MBIT}mbit"
    for shaper in (["netem", "delay", "5ms", "rate", rate],
                   ["tbf", "rate", rate, "burst", "64kbit", "latency", "400ms"]):  # fmt: skip
        done = subprocess.run([*tc, "add", "dev", "eth0", "root", *shaper],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        if done.returncode == 0:
            return " ".join(shaper)
    raise AssertionError(f"no tc shaper works here: {done.stderr}")


def _throttle(name: str, on: bool) -> None:
    """Node `name`'s CPU quota cut to an eighth of what a healthy node gets when every node's
    GEMM shares this machine's cores. A quota is 1 ms at least: under 1 % of a core (32 nodes on
    2 cores) the period grows from 100 ms to 1 s, else that floor leaves the throttled node a
    sixth of a healthy node's share, too close to the rehearsal's 75 % rule."""
    fraction = (os.cpu_count() or 1) / NODES / 8
    period = 100_000 if fraction >= 0.01 else 1_000_000
    quota = max(1000, int(period * fraction)) if on else -1
    _docker("update", "--cpu-period", str(period), "--cpu-quota", str(quota), name)


def _burnin_with_faults(env: dict, inventory: Path, slow_cpu: str, slow_link: str, tmp: Path):
    """`kiln burnin` with the faults injected while it runs: the link slowed throughout, the
    CPU throttled from the GEMM jobs' submission until the fabric phase (a node hot during its
    GEMM; throttled for the whole run its every job would crawl, the runtime's install too)."""
    log = tmp / "burnin.err"
    argv = [KILN, "burnin", str(inventory), "--suite", "quick", "--seconds", SECONDS, "--json"]
    shaper = _slow_link(slow_link, True)
    throttled = False
    try:
        with log.open("w") as err:
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
            try:
                _wait_for(log, "node GEMM: ", proc)
                _throttle(slow_cpu, True)
                throttled = True
                _wait_for(log, "fabric all-reduce: ", proc)
                _throttle(slow_cpu, False)
                throttled = False
                stdout, _ = proc.communicate(timeout=3600)
            finally:
                if proc.poll() is None:
                    proc.kill()
    finally:
        if throttled:
            _throttle(slow_cpu, False)
        _slow_link(slow_link, False)
    print(f"\n{slow_cpu}: throttled during its GEMM; {slow_link}: eth0 shaped with {shaper}")
    assert stdout.strip(), log.read_text()[-4000:]
    return proc.returncode, json.loads(stdout), log.read_text()


def _all_idle(nodes: list[str], timeout: float = 300) -> bool:
    """Every node idle in Slurm and answering: a node the faults kept from answering a ping
    shows `idle*` (not responding) until slurmctld's next ping of it succeeds."""
    deadline = time.monotonic() + timeout
    while True:
        lines = _on_controller("sinfo --noheader --Node --format='%N %t'").splitlines()
        if {line.split()[0]: line.split()[1] for line in lines} == dict.fromkeys(nodes, "idle"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(5)


def test_rehearsal_names_every_fault_and_brings_every_healthy_node_into_service(tmp_path):
    home = tmp_path / "home"
    with own_sandbox(INSTANCE, NODES, home) as (env, inventory_dir):
        nodes = [f"{INSTANCE}-node{i:02d}" for i in range(1, NODES + 1)]
        hung, rebooted, slow_cpu, slow_link = nodes[1], nodes[NODES // 2], nodes[2], nodes[-2]
        kept, lost = nodes[0], nodes[-1]  # the worker controllers; the second one is lost
        timings = {}
        start = time.monotonic()
        workers = _workers(inventory_dir, [kept, lost], tmp_path)
        timings["workers and mesh"] = time.monotonic() - start
        inventory = _inventory(inventory_dir, tmp_path / "inventory", workers)

        # 1. Provision in shards with a hung node, a rebooting node and a worker lost.
        start = time.monotonic()
        rc, summary, log, left = _provision_with_faults(
            env, inventory, hung, rebooted, tmp_path, lost if workers else None
        )
        timings["provision"] = time.monotonic() - start
        if workers:
            _docker("exec", lost, "systemctl", "start", "receptor")  # back for the next run
            _assert_lost_worker_fenced(summary, kept, lost, left)
        assert rc == 1, log[-4000:]
        assert hung in summary["unreachable_hosts"], (summary["unreachable_hosts"], log[-4000:])
        faulty = set(summary["failed_hosts"]) | set(summary["unreachable_hosts"])
        assert faulty <= {hung, rebooted}, (faulty, log[-4000:])
        assert not summary.get("stopped"), summary.get("stopped")
        healthy = [n for n in nodes if n not in faulty]
        for node in healthy:
            assert set(summary["hosts"][node].values()) <= {"ok", "changed"}, (
                node, summary["hosts"][node])  # fmt: skip

        start = time.monotonic()
        rc, retried, stderr = _kiln(env, "provision", str(inventory), "--yes", "--retry-failed")
        timings["retry"] = time.monotonic() - start
        assert rc == 0, stderr[-4000:]
        assert set(retried["hosts"]) >= faulty, retried["hosts"].keys()
        assert retried["failed_hosts"] == retried["unreachable_hosts"] == []

        # 2. Burn-in with a throttled CPU and a slowed link: those two drained, by name.
        start = time.monotonic()
        rc, doc, stderr = _burnin_with_faults(env, inventory, slow_cpu, slow_link, tmp_path)
        timings["burnin (faults)"] = time.monotonic() - start
        assert rc == 1, stderr[-4000:]
        assert set(doc["drained"]) == {slow_cpu, slow_link}, (doc["drained"], stderr[-4000:])
        for node in (slow_cpu, slow_link):
            assert doc["drained"][node].startswith(f"kiln:burnin:{doc['run_id']}: "), doc["drained"]
        failing: dict[str, set[str]] = {}
        for verdict in doc["report"]["verdicts"]:
            if not verdict["passed"] and verdict["action"] == "drain":
                failing.setdefault(verdict["node"], set()).add(verdict["check"])
        assert set(failing) == {slow_cpu, slow_link}, failing
        assert "node_vs_fleet" in failing[slow_cpu], failing  # its GEMM against the fleet
        assert "allreduce_pairs" in failing[slow_link], failing  # slow with every partner

        # 3. Faults cleared: a burn-in passes, resumes both; every node in service.
        start = time.monotonic()
        rc, doc, stderr = _kiln(env, "burnin", str(inventory), "--suite", "quick", "--seconds",
                                SECONDS, "--skip-runtime")  # fmt: skip
        timings["burnin (cleared)"] = time.monotonic() - start
        assert rc == 0, stderr[-4000:]
        assert sorted(doc["resumed"]) == sorted([slow_cpu, slow_link]) and doc["drained"] == {}
        shown = "scontrol show node | grep -E 'NodeName|State|Reason'"
        assert _all_idle(nodes), _on_controller(shown)
        rc, status, stderr = _kiln(env, "status", str(inventory))
        assert rc == 0, stderr[-4000:]
        lives = {n["name"]: n["lifecycle"] for n in status["nodes"]}
        assert lives == dict.fromkeys(nodes, "in_service"), lives
        print(f"\nrehearsal on {NODES} nodes: " + ", ".join(
            f"{step} {seconds:.0f}s" for step, seconds in timings.items()))  # fmt: skip

        # 4. Time to cluster, projected from this run's record beside what it measured.
        rc, projection, stderr = _kiln(env, "plan", str(inventory), "--estimate")
        assert rc == 0, stderr[-4000:]
        measured = {s["name"]: s for s in projection["measured"]["stages"]}
        assert {"preflight", "base", "slurm"} <= set(measured), measured
        assert projection["measured"]["burnin"]["nodes"] == NODES
        own, fleet = projection["estimates"][0], projection["estimates"][-1]
        assert (own["nodes"], fleet["nodes"]) == (NODES, 12_500) and fleet["bottleneck"]
        print(
            f"projected from this run, {NODES} nodes: provision {own['provision_seconds']:.0f}s "
            f"(measured {timings['provision']:.0f}s), burn-in {own['burnin_seconds']:.0f}s "
            f"(measured {timings['burnin (faults)']:.0f}s); 12,500 nodes: "
            f"{fleet['total_seconds'] / 3600:.1f} h on {fleet['controller']['cpus']} CPU(s), "
            f"bottleneck {fleet['bottleneck']}"
        )
