"""The sandbox network and its containers: systemd as PID 1, fixed names and addresses.

The flags are the ones that work on a cgroup v1 host where `--privileged` fails with
"unable to apply caps": SYS_ADMIN, no seccomp filter, the host's cgroup tree read-write and
tmpfs on /run and /run/lock. SYS_NICE is what a real host's root has and Docker's does not:
slurmstepd binds a user's tasks to CPUs (task/affinity), which without it fails every job but
root's ("task_g_set_affinity: Operation not permitted", "Slurmd could not execve job").
systempaths=unconfined leaves /proc unmasked, as on a host: a rootless container in a job
(crun under Slurm's OCI support) may then mount its own procfs, which the kernel refuses while
parts of the outer /proc are covered. A container keeps the flags it was made with: one made
with other flags (an older kiln's) is recreated, not reused (FLAGS_LABEL), and so is one left with
a CPU or memory limit (a test that throttled a node and was killed before lifting it): kiln
never sets one, and a reused node so limited fails every later burn-in.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from kiln.errors import OperationFailed
from kiln.sandbox.config import GATEWAY, INSTANCE, LABEL, NETWORK, ROLE_LABEL, SUBNET, Node
from kiln.sandbox.docker import docker

SYSTEMD_FLAGS = (
    "--cap-add", "SYS_ADMIN",
    "--cap-add", "SYS_NICE",
    "--security-opt", "seccomp=unconfined",
    "--security-opt", "systempaths=unconfined",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs", "/run",
    "--tmpfs", "/run/lock",
)  # fmt: skip
SYSTEMD_COMMAND = "/lib/systemd/systemd"
READY_STATES = ("running", "degraded")
FLAGS_LABEL = "kiln.sandbox.flags"
FLAGS_DIGEST = hashlib.sha256("\0".join(SYSTEMD_FLAGS).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ContainerState:
    name: str
    address: str
    state: str  # docker's: running, exited, created, ... or "absent"
    image_id: str  # what it runs, as an image ID, so a rebuilt tag is noticed
    role: str
    flags: str = FLAGS_DIGEST  # FLAGS_DIGEST of the flags it was made with
    limits: tuple[str, ...] = ()  # resource_limits() of its HostConfig


def resource_limits(host_config: dict) -> list[str]:
    """The CPU and memory limits a container's HostConfig holds, in words (none: []).
    A lifted quota reads -1 (`docker update --cpu-quota -1`), an unset one 0."""
    found = []
    quota, period = host_config.get("CpuQuota") or 0, host_config.get("CpuPeriod") or 100000
    if quota > 0:
        found.append(f"CPU quota {quota}/{period}")
    if (host_config.get("NanoCpus") or 0) > 0:
        found.append(f"{host_config['NanoCpus'] / 1e9:g} CPUs")
    if host_config.get("CpusetCpus"):
        found.append(f"CPUs {host_config['CpusetCpus']}")
    if (host_config.get("Memory") or 0) > 0:
        found.append(f"memory {host_config['Memory'] >> 20} MiB")
    return found


def network_create_command(internal: bool = False) -> list[str]:
    """internal: no route beyond the network's own containers (an air-gapped sandbox)."""
    return [
        "network", "create",
        "--driver", "bridge",
        *(["--internal"] if internal else []),
        "--subnet", SUBNET,
        "--gateway", GATEWAY,
        "--label", f"{LABEL}={INSTANCE}",
        NETWORK,
    ]  # fmt: skip


def run_command(node: Node, image: str) -> list[str]:
    """`docker run` arguments for one node."""
    return [
        "run", "--detach",
        "--name", node.name,
        "--hostname", node.name,
        "--network", NETWORK,
        "--ip", node.address,
        "--label", f"{LABEL}={INSTANCE}",
        "--label", f"{ROLE_LABEL}={node.role}",
        "--label", f"{FLAGS_LABEL}={FLAGS_DIGEST}",
        *SYSTEMD_FLAGS,
        "--stop-signal", "SIGRTMIN+3",
        "--env", "container=docker",
        image,
        SYSTEMD_COMMAND,
    ]  # fmt: skip


def ensure_network(internal: bool = False) -> bool:
    """Create the network unless it exists; True when it was created."""
    if docker(["network", "inspect", NETWORK], check=False).returncode == 0:
        return False
    docker(network_create_command(internal))
    return True


def remove_network() -> bool:
    if docker(["network", "inspect", NETWORK], check=False).returncode != 0:
        return False
    docker(["network", "rm", NETWORK])
    return True


def containers() -> list[ContainerState]:
    """Every container labelled as part of the sandbox, sorted by name."""
    ids = docker(["ps", "--all", "--quiet", "--filter", f"label={LABEL}={INSTANCE}"]).stdout.split()
    if not ids:
        return []
    found = []
    for info in json.loads(docker(["inspect", *ids]).stdout):
        networks = info.get("NetworkSettings", {}).get("Networks") or {}
        found.append(
            ContainerState(
                name=info["Name"].lstrip("/"),
                address=(networks.get(NETWORK) or {}).get("IPAddress", ""),
                state=info["State"]["Status"],
                image_id=info["Image"],
                role=info["Config"]["Labels"].get(ROLE_LABEL, ""),
                flags=info["Config"]["Labels"].get(FLAGS_LABEL, ""),
                limits=tuple(resource_limits(info.get("HostConfig") or {})),
            )
        )
    return sorted(found, key=lambda c: (c.role != "controller", c.name))


def image_id(tag: str) -> str:
    return docker(["image", "inspect", "--format", "{{.Id}}", tag]).stdout.strip()


def ensure_container(node: Node, image: str, existing: ContainerState | None) -> str:
    """Start `node`, reusing a container of the same image. Returns what was done."""
    if existing is not None:
        if (
            existing.flags == FLAGS_DIGEST
            and not existing.limits
            and existing.image_id == image_id(image)
            and existing.address in (node.address, "")
        ):
            if existing.state == "running":
                return "reused"
            docker(["start", node.name])
            return "started"
        docker(["rm", "--force", node.name])
        docker(run_command(node, image))
        return "recreated"
    docker(run_command(node, image))
    return "created"


def remove_container(name: str) -> None:
    docker(["rm", "--force", "--volumes", name])


def systemd_state(name: str) -> str:
    """`systemctl is-system-running` inside the container (running, degraded, starting, ...)."""
    proc = docker(["exec", name, "systemctl", "is-system-running"], check=False, timeout=30)
    return proc.stdout.strip() or "unknown"


def _port_open(address: str, port: int = 22) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1) as conn:
            return conn.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def wait_ready(
    node: Node, timeout: float = 90, progress: Callable[[str], None] | None = None
) -> str:
    """Wait until systemd finished booting and sshd answers; the systemd state. Says how the
    wait goes every 10 s, so a slow boot is never a silent one."""
    start = time.monotonic()
    deadline, told = start + timeout, start
    state = "unknown"
    while time.monotonic() < deadline:
        state = systemd_state(node.name)
        if state in READY_STATES and _port_open(node.address):
            return state
        if progress is not None and time.monotonic() - told >= 10:
            told = time.monotonic()
            progress(f"{node.name}: still booting after {told - start:.0f}s (systemd: {state})")
        time.sleep(0.5)
    raise OperationFailed(
        f"{node.name} did not become ready within {timeout:.0f}s (systemd: {state}; "
        f"sshd on {node.address}:22 {'answers' if _port_open(node.address) else 'does not answer'})"
    )
