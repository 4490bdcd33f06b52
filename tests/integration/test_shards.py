"""Sharded provisioning on the Docker sandbox: two shards of one node in parallel, and shards
through worker controllers (the controller container and a compute node as `kiln_workers`), the
first worker killed mid-shard, each with the same end state and run record shape as an unsharded
run.

Works on a copy of the sandbox inventory (never the shared one) and runs preflight,base with
`base_hosts_manage: false`: a shard's inventory holds only its own hosts plus the controllers, and
the base role still builds /etc/hosts from the inventory's groups (see docs/scale.md), so letting a
sharded run write /etc/hosts would shrink it on the shared containers. Slurm is not touched.

The worker test makes kiln-ctl and a node worker controllers as docs/scale.md describes one:
a venv with kiln installed (which brings ansible-runner and ansible; kiln's roles call kiln's own
code through filter plugins), from wheels fetched here for the controller's Python (containers
cannot reach PyPI through this machine's proxy): about 30 s each. Set KILN_TEST_WORKER=0 to skip it.
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
from receptorctl.socket_interface import ReceptorControl

from .worker_hosts import (
    HUB_CONTROL_PORT,
    hub_address,
    install_worker,
    mesh_credentials,
    receptor_packaged,
    set_up_mesh,
)

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
STAGES = "preflight,base"
RECORD_KEYS = {"name", "status", "reached_recap", "batches", "hosts", "shards", "changed"}


def copy_inventory(sandbox, tmp_path: Path, rollout: dict, extra_hosts: str = "") -> Path:
    inventory = tmp_path / "inventory"
    shutil.copytree(sandbox.inventory, inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    text = group_vars.read_text()
    text += f"kiln_rollout: {json.dumps(rollout)}\nbase_hosts_manage: false\n"
    group_vars.write_text(text)
    if extra_hosts:
        hosts = inventory / "hosts.yml"
        hosts.write_text(hosts.read_text().rstrip("\n") + "\n" + extra_hosts)
    return inventory


def provision(inventory: Path, state: Path) -> tuple[int, dict, str]:
    proc = subprocess.run(
        # --full: the shards' runs themselves, whatever the nodes recorded of earlier runs
        [KILN, "provision", str(inventory), "--stages", STAGES, "--full", "--yes", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "KILN_HOME": str(state)},
        timeout=1800,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout or "{}"), proc.stderr


def statuses(summary: dict) -> dict:
    return {host: set(stages.values()) for host, stages in summary["hosts"].items()}


@pytest.fixture(scope="module")
def unsharded(sandbox, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("unsharded")
    # one compute shard holding every node: the shape of a run before sharding
    inventory = copy_inventory(sandbox, tmp, {"shard_by": "count", "shard_size": 1000})
    code, summary, stderr = provision(inventory, tmp / "state")
    assert code == 0, stderr[-3000:]
    return summary


def test_two_shards_of_one_node_run_in_parallel(sandbox, unsharded, tmp_path):
    rollout = {"shard_by": "count", "shard_size": 1, "max_parallel_shards": 2}
    inventory = copy_inventory(sandbox, tmp_path, rollout)
    code, summary, stderr = provision(inventory, tmp_path / "state")
    assert code == 0, stderr[-3000:]
    for entry in summary["stages"]:
        assert set(entry) >= RECORD_KEYS
        names = [shard["name"] for shard in entry["shards"]]
        assert names == ["controllers", "part-001", "part-002"], names
        one, two = entry["shards"][1:]
        assert one["started"] <= two["finished"] and two["started"] <= one["finished"]
    assert set(summary["hosts"]) == set(unsharded["hosts"])
    assert all(s <= {"ok", "changed"} for s in statuses(summary).values())
    assert summary["changed"] == 0  # the unsharded run converged them: same end state
    assert summary["failed_hosts"] == summary["unreachable_hosts"] == []
    record = Path(summary["record"])
    assert (record / "shards" / "part-001" / "hosts.json").is_file()
    exported = json.loads((record / "shards" / "part-002" / "hosts.json").read_text())
    assert set(exported["all"]["hosts"]) == {"kiln-ctl", sandbox.nodes[-1].name}


def _kill_first_worker_job(container: str, killed: list[str], stop: threading.Event) -> None:
    """Kill -9 every process of the first worker job seen on `container` (as if it powered
    off mid-shard), once its ansible-playbook is running."""
    while not stop.is_set():
        found = subprocess.run(
            ["docker", "exec", container, "pgrep", "-f", "ansible-playbook.*/tmp/kiln-worker/"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if found.returncode == 0:
            time.sleep(1)  # under way
            tree = subprocess.run(
                ["docker", "exec", container, "ps", "-eo", "args"],
                capture_output=True, text=True, check=False,
            ).stdout  # fmt: skip
            subprocess.run(
                ["docker", "exec", container, "pkill", "-KILL", "-f", "/tmp/kiln-worker/"],
                check=False,
            )
            killed += [found.stdout.split()[0], tree]
            return
        time.sleep(0.3)


@pytest.fixture(scope="module")
def worker_runner(sandbox, tmp_path_factory) -> str:
    """kiln-ctl and the last compute node made worker controllers; their ansible-runner."""
    if os.environ.get("KILN_TEST_WORKER") == "0":
        pytest.skip("KILN_TEST_WORKER=0")
    tmp = tmp_path_factory.mktemp("workers")
    keys = (sandbox.private_key, sandbox.known_hosts)
    runner = install_worker("kiln-ctl", tmp / "wheels", keys)
    install_worker(sandbox.nodes[-1].name, tmp / "wheels-b", keys)
    return runner


def _workers(sandbox) -> str:
    other = sandbox.nodes[-1].name  # a compute node, as a second worker
    return f"    kiln_workers:\n      hosts:\n        kiln-ctl:\n        {other}:\n"


def provision_killing_first_job(inventory: Path, state: Path) -> tuple[int, dict, str, list]:
    """`provision` while kiln-ctl's first worker job is killed mid-shard (its processes as
    `ps` listed them when it was, in the last element)."""
    killed: list[str] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_first_worker_job, args=("kiln-ctl", killed, stop))
    killer.start()
    try:
        code, summary, stderr = provision(inventory, state)
    finally:
        stop.set()
        killer.join()
    return code, summary, stderr, killed


def test_a_worker_lost_mid_shard_hands_its_shard_to_the_other(
    sandbox, unsharded, worker_runner, tmp_path
):
    """Workers kiln-ctl and the last compute node; kiln-ctl's first job is killed while it
    runs: kiln stops what is left of it over ssh, runs the shard on the node, and every later
    shard there too; the run ends as a clean one does."""
    rollout = {"shard_by": "count", "shard_size": 100, "worker_runner": worker_runner}
    inventory = copy_inventory(sandbox, tmp_path, rollout, extra_hosts=_workers(sandbox))
    code, summary, stderr, killed = provision_killing_first_job(inventory, tmp_path / "state")
    assert_handed_over(sandbox, unsharded, code, summary, stderr, killed)


def assert_handed_over(sandbox, unsharded, code, summary, stderr, killed) -> None:
    """kiln-ctl's job was killed, its shard and every later one ran on the other worker, and
    the run ended as an unsharded one did."""
    other = sandbox.nodes[-1].name
    assert killed, "kiln-ctl never ran a worker job"
    assert code == 0, stderr[-3000:] + json.dumps(summary.get("stopped"))
    compute = [s for e in summary["stages"] for s in e["shards"] if s["name"] != "controllers"]
    assert compute[0]["worker"] == other
    assert compute[0]["requeued_from"] == ["kiln-ctl"]
    assert all(s["worker"] == other for s in compute)  # the lost one: no more
    assert all(s["reached_recap"] for e in summary["stages"] for s in e["shards"])
    assert set(summary["hosts"]) == set(unsharded["hosts"])
    assert all(s <= {"ok", "changed"} for s in statuses(summary).values())
    assert summary["changed"] == 0  # converged before: the requeued run changed nothing
    events = Path(summary["record"]) / "events.jsonl"
    lost = [
        json.loads(line) for line in events.read_text().splitlines() if "kiln_worker_lost" in line
    ]
    assert [(e["worker"], e["job"]) for e in lost] == [("kiln-ctl", "stopped")]
    artifact = Path(summary["stages"][-1]["shards"][1]["artifact_dir"])
    assert (artifact / "rc").read_text().strip() == "0"  # artifacts came home


def test_through_a_receptor_mesh_a_lost_worker_hands_its_shard_to_the_other(
    sandbox, unsharded, worker_runner, tmp_path
):
    """The same two workers reached through a Receptor mesh (playbooks/receptor.yml: the hub
    on kiln-ctl, mutual TLS): the shards run as Receptor work units, kiln-ctl's first one is
    killed mid-shard, kiln stops what is left of it through the mesh and runs the shard on the
    node. Debian 13 packages Receptor; Debian 12 does not (skipped there)."""
    if not receptor_packaged("kiln-ctl"):
        pytest.skip("this sandbox's OS has no receptor package (Debian 13 has)")
    rollout = {"shard_by": "count", "shard_size": 100, "worker_runner": worker_runner}
    inventory = copy_inventory(sandbox, tmp_path / "mesh", rollout, extra_hosts=_workers(sandbox))
    client = tmp_path / "receptor"
    set_up_mesh(inventory, client)
    # The worker reimaged (an RMA, a reinstall): a new key under the same name, while the hub
    # keeps the certificate it signed for the old one. Handed that, Receptor would refuse to
    # start ("private key does not match public key"); the new request is signed instead.
    worker = sandbox.nodes[-1].name
    subprocess.run(["docker", "exec", worker, "rm", "-rf", "/etc/receptor/tls"], check=True)
    set_up_mesh(inventory, client)
    again = set_up_mesh(inventory, client)
    assert "changed=0" in again.split("PLAY RECAP")[-1], again[-2000:]  # nothing to change
    socket = f"tls://{hub_address(sandbox.inventory, 'kiln-ctl')}:{HUB_CONTROL_PORT}"
    credentials = mesh_credentials(client)
    status = ReceptorControl(socket, rootcas=credentials["ca"], cert=credentials["cert"],
                             key=credentials["key"]).simple_command("status")  # fmt: skip
    assert {"kiln-ctl", sandbox.nodes[-1].name} <= set(status["KnownConnectionCosts"])
    with pytest.raises((OSError, ValueError)):  # no client certificate: refused
        ReceptorControl(socket, rootcas=credentials["ca"]).simple_command("status")
    rollout |= {"worker_transport": "receptor", "receptor": {"socket": socket, **credentials}}
    inventory = copy_inventory(sandbox, tmp_path / "run", rollout, extra_hosts=_workers(sandbox))
    code, summary, stderr, killed = provision_killing_first_job(inventory, tmp_path / "state")
    assert_handed_over(sandbox, unsharded, code, summary, stderr, killed)
    tree = killed[1]  # the killed job ran under Receptor's command runner, not ssh
    assert "--command-runner command=/opt/kiln-worker/bin/python3" in tree, tree
    assert "kiln.runner.worker_side receptor-run" in tree, tree
