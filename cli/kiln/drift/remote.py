"""node.py over SSH: the probe (one exec per node, the same command for all) and the records.

Both run as root (the records are 0600 under /var/lib/kiln/applied, and a managed file such as
munge.key is root's), through kiln.fleet.as_root: as the login user when it is root, else through
`sudo -n`. A node whose probe fails for any reason (unreachable, sudo refused, no python3, garbled
output) is a NodeProbe with `ok` False: kiln.drift.assess then runs every stage there.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.fleet import CommandOutcome, ExecResult, NodeResult, as_root, run_as_root, run_command
from kiln.inventory import Cluster, Node
from kiln.profiles.slurm import expected_version
from kiln.records.status import BAD, GOOD, HostStatus

Runner = Callable[..., ExecResult]  # kiln.fleet.run_command's signature
NODE_SCRIPT = Path(__file__).resolve().with_name("node.py")
PROBE_TIMEOUT = 60.0
# A stage's record is removed from such a host (a not_run host was not touched: its record stays).
UNDONE = BAD | {HostStatus.ABORTED}


@dataclass(frozen=True, slots=True)
class NodeProbe:
    """One node's probe: per stage {fingerprint, run_id, recorded, drift}, restart markers."""

    node: str
    ok: bool
    stages: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    pending: tuple[str, ...] = ()
    error: str | None = None
    seconds: float = 0.0
    joined: str | None = None  # what the slurm_node role last saw of the node's hardware
    identity: str | None = None  # what the node's identity reader prints now


def node_command(*args: str) -> str:
    """The shell command that runs node.py with `args` (kiln.fleet.as_root makes it root's)."""
    source = base64.b64encode(NODE_SCRIPT.read_bytes()).decode()
    program = f"import base64;exec(compile(base64.b64decode('{source}'),'kiln-drift','exec'))"
    return " ".join(["python3", "-c", shlex.quote(program), *map(shlex.quote, args)])


def _parse(answer: NodeResult) -> NodeProbe:
    def failed(why: str) -> NodeProbe:
        return NodeProbe(answer.name, False, error=why, seconds=answer.duration)

    if answer.status is not CommandOutcome.OK:
        detail = answer.error or answer.stderr.strip()[-300:] or f"exit {answer.exit_code}"
        return failed(f"{answer.status}: {detail}")
    try:
        document = json.loads(answer.stdout.strip().splitlines()[-1])
        stages = document["stages"]
        assert isinstance(stages, dict)
    except (ValueError, IndexError, KeyError, AssertionError):
        return failed(f"unreadable probe output: {answer.stdout.strip()[-300:]!r}")
    if document.get("errors"):  # a record it could not read: that node is not trusted
        return failed("; ".join(map(str, document["errors"]))[:500])
    pending = tuple(document.get("pending") or ())
    joined, identity = document.get("joined"), document.get("identity")
    return NodeProbe(answer.name, True, stages, pending, seconds=answer.duration,
                     joined=joined if isinstance(joined, str) else None,
                     identity=identity if isinstance(identity, str) else None)  # fmt: skip


def probe_nodes(
    nodes: Sequence[Node],
    *,
    runner: Runner = run_command,
    fanout: int = 64,
    timeout: float = PROBE_TIMEOUT,
) -> dict[str, NodeProbe]:
    """Probe every node at once (at most `fanout` in flight); node name -> its NodeProbe. A node
    Ansible reaches without SSH (ansible_connection=local) is not probed: probe_failed, it runs."""
    probes = {n.name: NodeProbe(n.name, False, error=LOCAL) for n in nodes if _local(n)}
    remote = [node for node in nodes if not _local(node)]
    if remote:
        command = node_command("probe")
        result = run_as_root(remote, command, runner=runner, fanout=fanout, timeout=timeout)
        probes.update({answer.name: _parse(answer) for answer in result.results})
    return {node.name: probes[node.name] for node in nodes if node.name in probes}


LOCAL = "not probed: ansible_connection=local"


def _local(node: Node) -> bool:
    return str(node.hostvars.get("ansible_connection") or "") == "local"


# Files a stage writes in `no_log` tasks: their results are censored and name nothing, so they
# are declared here (the node hashes them when it records; the hash stays on the node, root-only).
# The munge key above all: a corrupted key is drift a re-apply must find and repair.
NO_LOG_FILES: dict[str, tuple[str, ...]] = {"slurm": ("/etc/munge/munge.key",)}


def declared_versions(cluster: Cluster, host: str) -> dict[str, dict[str, str]]:
    """stage -> program -> the version it must report on `host` (node.py's VERSION_COMMANDS):
    the slurm stage's daemons, slurmctld on a controller and slurmd on a compute node, at
    kiln_versions.slurm as written, else what the node's platform ships (the version the slurm
    roles install and hold). Empty where kiln cannot tell (a platform the table lacks)."""
    node = cluster.node(host)
    expected = expected_version(cluster.declared_slurm(node), cluster.slurm.source, node.platform)
    daemons = ["slurmctld"] * node.is_controller + ["slurmd"] * node.is_compute
    return {"slurm": dict.fromkeys(daemons, expected)} if expected and daemons else {}


def payloads(
    stages: Mapping[str, Mapping[str, str]],
    managed: Mapping[str, Mapping[str, Mapping[str, list[str]]]],
    desired: Mapping[str, Mapping[str, str]],
    run_id: str,
    versions: Callable[[str], Mapping[str, Mapping[str, str]]] = lambda host: {},
) -> dict[str, dict[str, Any]]:
    """host -> node.py's record payload: a record for each stage that ended ok or changed on
    it (its fingerprint, what the run's results named, the versions `versions(host)` declares
    for it), removal for one that ended badly. `stages`: stage -> host -> its status there."""
    out: dict[str, dict[str, Any]] = {}
    for name, statuses in stages.items():
        for host, status in statuses.items():
            wanted = desired.get(name, {}).get(host)
            payload = out.setdefault(host, {"records": {}, "remove": []})
            if status in GOOD and wanted is not None:
                names = managed.get(name, {}).get(host) or {}
                payload["records"][name] = {
                    "fingerprint": wanted,
                    "run_id": run_id,
                    "files": sorted({*names.get("files", []), *NO_LOG_FILES.get(name, ())}),
                    "packages": list(names.get("packages", [])),
                    "services": list(names.get("services", [])),
                    "versions": dict(versions(host).get(name, {})),
                }
            elif status in UNDONE:
                payload["remove"].append(name)
    return {host: p for host, p in out.items() if p["records"] or p["remove"]}


def write_records(
    cluster: Cluster,
    stages: Mapping[str, Mapping[str, str]],
    managed: Mapping[str, Mapping[str, Mapping[str, list[str]]]],
    desired: Mapping[str, Mapping[str, str]],
    run_id: str,
    *,
    runner: Runner = run_command,
    fanout: int = 64,
    timeout: float = PROBE_TIMEOUT,
) -> dict[str, str]:
    """Write each host's records (one exec per host, `fanout` at once). Returns host -> why for
    the hosts where it failed: those keep their old records or none, and the next run's probe
    (an old fingerprint, or no record) runs their stages again."""
    work = payloads(stages, managed, desired, run_id, lambda host: declared_versions(cluster, host))
    work = {host: p for host, p in work.items() if not _local(cluster.node(host))}
    problems: dict[str, str] = {}

    def one(host: str) -> None:
        text = json.dumps(work[host], sort_keys=True, separators=(",", ":"))
        node = cluster.node(host)
        command = as_root(node, node_command("record", base64.b64encode(text.encode()).decode()))
        answer = runner([node], command, fanout=1, timeout=timeout).results[0]
        if answer.status is not CommandOutcome.OK:
            problems[host] = f"{answer.status}: {answer.error or answer.stderr.strip()[-300:]}"

    if work:
        with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(work)))) as pool:
            list(pool.map(one, list(work)))
    return problems
