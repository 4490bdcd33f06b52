"""SSH trust for the sandbox: kiln's own key pair and known_hosts taken from inside each node.

Host keys are read from the container itself (`docker exec cat`), never by ssh-keyscan over the
network, so host key checking stays on and means something.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from kiln.errors import EnvironmentProblem, OperationFailed
from kiln.sandbox.config import Node
from kiln.sandbox.docker import docker

HOST_KEY = "/etc/ssh/ssh_host_ed25519_key.pub"


def ensure_keypair(private_key: Path) -> bool:
    """Generate an ed25519 key pair unless one exists; True when generated."""
    public_key = private_key.with_name(private_key.name + ".pub")
    if private_key.exists() and public_key.exists():
        return False
    private_key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    private_key.unlink(missing_ok=True)
    public_key.unlink(missing_ok=True)
    try:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kiln-sandbox",
             "-f", str(private_key)],
            check=True, capture_output=True,
        )  # fmt: skip
    except FileNotFoundError as error:
        raise EnvironmentProblem(
            "ssh-keygen is not installed", hint="apt-get install openssh-client"
        ) from error
    return True


def authorize(node: Node, public_key: Path) -> None:
    """Add `public_key` to root's authorized_keys on the node (once; other keys stay)."""
    key = public_key.read_text().strip()
    script = (
        "install -d -m 0700 /root/.ssh && touch /root/.ssh/authorized_keys && "
        "chmod 0600 /root/.ssh/authorized_keys && "
        'grep -qxF "$1" /root/.ssh/authorized_keys || '
        'printf "%s\\n" "$1" >> /root/.ssh/authorized_keys'
    )
    docker(["exec", node.name, "sh", "-c", script, "authorize", key])


def host_key(node: Node) -> str:
    """`<type> <base64>` of the node's ed25519 host key, read from inside the container."""
    fields = docker(["exec", node.name, "cat", HOST_KEY]).stdout.split()
    if len(fields) < 2 or fields[0] != "ssh-ed25519":
        raise OperationFailed(f"{node.name}: unexpected host key in {HOST_KEY}")
    return f"{fields[0]} {fields[1]}"


def known_hosts_line(node: Node, key: str) -> str:
    """One known_hosts line valid for the node's hostname and its address."""
    return f"{node.name},{node.address} {key}"


def write_known_hosts(path: Path, lines: Sequence[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text("".join(line + "\n" for line in lines))


def ssh_command(node: Node, private_key: Path, known_hosts: Path, *remote: str) -> list[str]:
    """ssh with host key checking on, the sandbox key only, and no prompts."""
    return [
        "ssh",
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "IdentitiesOnly=yes",
        "-o", "ConnectTimeout=10",
        "-i", str(private_key),
        f"root@{node.address}",
        *(remote or ("true",)),
    ]  # fmt: skip


def prove(node: Node, private_key: Path, known_hosts: Path) -> None:
    """Log in to the node the way Ansible will; OperationFailed with ssh's reason if not."""
    proc = subprocess.run(
        ssh_command(node, private_key, known_hosts),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise OperationFailed(
            f"ssh to {node.name} ({node.address}) with host key checking failed: "
            f"{proc.stderr.strip() or f'rc {proc.returncode}'}"
        )
