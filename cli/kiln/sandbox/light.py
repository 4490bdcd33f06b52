"""Light sandbox hosts: many containers that run only sshd, for measuring the engine over SSH.

A full sandbox node boots systemd and runs Slurm; a hundred of them do not fit on a laptop. A
light host is the same node image running `sshd -D` as PID 1: a real SSH server with its own host
key and python3, about 10 MiB a host, enough for Ansible's and mitogen's connections and for
modules that touch files and run commands (bench/engine_ssh.py). They live on their own network
and label, so `kiln sandbox up` never mistakes them for nodes and `kiln sandbox down` removes them.

Trust is as strict as the full sandbox's: each container generates its own ed25519 host key at
start and copies the public half into a directory bind-mounted from the state dir, which becomes
known_hosts; ssh-keyscan is never used.
"""

from __future__ import annotations

import ipaddress
import json
import time
from dataclasses import dataclass
from pathlib import Path

from kiln.errors import InvalidInputError, OperationFailed
from kiln.sandbox import image, ssh
from kiln.sandbox.config import INSTANCE, SUBNET, Node, Paths
from kiln.sandbox.docker import docker, require_docker

LABEL = "kiln.sandbox.light"
NETWORK = f"{INSTANCE}-light"
# The full sandbox's /24 with its second octet one lower: 172.31.250.0/24 -> 172.30.250.0/24.
SUBNET_LIGHT = str(ipaddress.ip_network(SUBNET).network_address - 2**16) + "/24"
FIRST_OCTET = 11
MAX_LIGHT = 200  # .11 .. .210
READY_TIMEOUT_S = 120.0
REMOVE_AT_ONCE = 10

# PID 1 of a light host: a fresh host key, the sandbox's public key for root, the host key's
# public half published for known_hosts (written then renamed, so a reader never sees half),
# then sshd in the foreground.
START = """\
set -eu
rm -f /etc/ssh/ssh_host_*
ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
install -d -m 0700 /root/.ssh /run/sshd
printf '%s\\n' "$KILN_AUTHORIZED_KEY" > /root/.ssh/authorized_keys
chmod 0600 /root/.ssh/authorized_keys
cp /etc/ssh/ssh_host_ed25519_key.pub "/kiln-hostkeys/$(hostname).tmp"
mv "/kiln-hostkeys/$(hostname).tmp" "/kiln-hostkeys/$(hostname).pub"
exec /usr/sbin/sshd -D -e -h /etc/ssh/ssh_host_ed25519_key
"""


@dataclass
class LightResult:
    inventory: Path
    nodes: list[Node]
    created: int
    seconds: float


def light_nodes(count: int) -> list[Node]:
    """`count` light hosts in a fixed order and fixed addresses; the first plays the controller."""
    network = ipaddress.ip_network(SUBNET_LIGHT)
    return [
        Node(
            f"{INSTANCE}-light{index:03d}",
            str(network.network_address + FIRST_OCTET + index - 1),
            "controller" if index == 1 else "compute",
        )
        for index in range(1, count + 1)
    ]


def light_dir(paths: Paths) -> Path:
    return paths.sandbox_dir / "light"


def run_command(node: Node, tag: str, public_key: str, hostkeys: Path) -> list[str]:
    return [
        "run", "--detach",
        "--name", node.name,
        "--hostname", node.name,
        "--network", NETWORK,
        "--ip", node.address,
        "--label", f"{LABEL}={INSTANCE}",
        "--volume", f"{hostkeys}:/kiln-hostkeys",
        "--env", f"KILN_AUTHORIZED_KEY={public_key}",
        "--entrypoint", "/bin/sh",
        tag, "-c", START,
    ]  # fmt: skip


def render_inventory(nodes: list[Node], paths: Paths) -> str:
    """A kiln inventory of the light hosts (also a plain Ansible one): every host as root over
    SSH with host key checking on, the sandbox's key."""
    groups = {"kiln_controllers": nodes[:1], "kiln_compute": nodes[1:]}
    lines = ["---", "# Light sandbox hosts (sshd only), written by kiln.sandbox.light.", "all:"]
    lines += [
        "  vars:",
        "    kiln_cluster_name: light",
        "    ansible_user: root",
        "    ansible_python_interpreter: /usr/bin/python3",
        f"    ansible_ssh_private_key_file: {paths.private_key}",
        "    ansible_ssh_common_args: >-",
        f"      -o UserKnownHostsFile={light_dir(paths) / 'known_hosts'}",
        "      -o StrictHostKeyChecking=yes",
        "  children:",
    ]
    for group, members in groups.items():
        lines += [f"    {group}:", "      hosts:"]
        for node in members:
            lines += [
                f"        {node.name}:",
                f"          ansible_host: {node.address}",
                "          kiln_rack: light",
                "          kiln_gpu_model: none",
                "          kiln_gpu_count: 0",
            ]
    return "\n".join(lines) + "\n"


def _existing() -> dict[str, str]:
    """Name -> state of every light container of this instance."""
    ids = docker(["ps", "--all", "--quiet", "--filter", f"label={LABEL}={INSTANCE}"]).stdout.split()
    if not ids:
        return {}
    return {
        info["Name"].lstrip("/"): info["State"]["Status"]
        for info in json.loads(docker(["inspect", *ids]).stdout)
    }


def _wait_for_host_keys(nodes: list[Node], hostkeys: Path) -> dict[str, str]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    keys: dict[str, str] = {}
    while time.monotonic() < deadline:
        for node in nodes:
            if node.name not in keys and (hostkeys / f"{node.name}.pub").exists():
                fields = (hostkeys / f"{node.name}.pub").read_text().split()
                keys[node.name] = f"{fields[0]} {fields[1]}"
        if len(keys) == len(nodes):
            return keys
        time.sleep(0.2)
    missing = sorted({n.name for n in nodes} - set(keys))
    raise OperationFailed(f"{len(missing)} light host(s) never published a host key: {missing[:5]}")


def up(count: int, paths: Paths) -> LightResult:
    """`count` light hosts running (fresh ones replace any of another count), trusted over SSH,
    with an inventory; proven by one ssh login each."""
    if not 1 <= count <= MAX_LIGHT:
        raise InvalidInputError(f"light hosts must be between 1 and {MAX_LIGHT}, not {count}")
    start = time.monotonic()
    require_docker()
    down()  # fresh host keys every time: known_hosts is rebuilt from what the hosts publish
    tag = image.ensure_image(lambda *_args, **_kw: None).tag
    ssh.ensure_keypair(paths.private_key)
    public_key = paths.public_key.read_text().strip()
    hostkeys = light_dir(paths) / "hostkeys"
    hostkeys.mkdir(parents=True, exist_ok=True)
    for stale in hostkeys.glob("*.pub"):
        stale.unlink()
    if docker(["network", "inspect", NETWORK], check=False).returncode != 0:
        docker(
            ["network", "create", "--driver", "bridge", "--subnet", SUBNET_LIGHT,
             "--label", f"{LABEL}={INSTANCE}", NETWORK]
        )  # fmt: skip
    nodes = light_nodes(count)
    for node in nodes:
        docker(run_command(node, tag, public_key, hostkeys))
    keys = _wait_for_host_keys(nodes, hostkeys)
    known_hosts = light_dir(paths) / "known_hosts"
    ssh.write_known_hosts(known_hosts, [ssh.known_hosts_line(n, keys[n.name]) for n in nodes])
    inventory = light_dir(paths) / "hosts.yml"
    inventory.write_text(render_inventory(nodes, paths))
    for node in nodes:
        _prove(node, paths.private_key, known_hosts)
    return LightResult(inventory, nodes, len(nodes), time.monotonic() - start)


def _prove(node: Node, private_key: Path, known_hosts: Path) -> None:
    """sshd may still be starting after the key is published: retry for a few seconds."""
    deadline = time.monotonic() + 30
    while True:
        try:
            ssh.prove(node, private_key, known_hosts)
            return
        except OperationFailed:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def down() -> list[str]:
    """Remove every light container and the light network; the names removed."""
    require_docker()
    names = sorted(_existing())
    # A few at a time: removing a hundred containers in one call left dockerd 20.10 holding
    # endpoints of containers already gone, and then the network cannot be removed.
    for first in range(0, len(names), REMOVE_AT_ONCE):
        docker(["rm", "--force", *names[first : first + REMOVE_AT_ONCE]], timeout=600)
    if docker(["network", "inspect", NETWORK], check=False).returncode == 0:
        proc = docker(["network", "rm", NETWORK], check=False)
        if proc.returncode != 0:
            raise OperationFailed(
                f"`docker network rm {NETWORK}` failed: {proc.stderr.strip()}",
                hint="dockerd kept endpoints of removed containers; restarting dockerd clears them",
            )
    return names
