"""Names, addresses and paths of the sandbox: one place, so tests and code agree."""

from __future__ import annotations

import ipaddress
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

# One sandbox per instance name: KILN_SANDBOX=kb gives kb-ctl, kb-node01, ... on their own
# network, so a second sandbox can run beside the default `kiln` one.
INSTANCE = os.environ.get("KILN_SANDBOX", "kiln").strip() or "kiln"
_THIRD_OCTET = 250 if INSTANCE == "kiln" else 200 + zlib.crc32(INSTANCE.encode()) % 50
NETWORK = f"{INSTANCE}-sandbox"
SUBNET = f"172.31.{_THIRD_OCTET}.0/24"
GATEWAY = f"172.31.{_THIRD_OCTET}.1"
CONTROLLER = f"{INSTANCE}-ctl"
CONTROLLER_HOST_OCTET = 10
LABEL = "kiln.sandbox"  # on the network and every container: how kiln finds them
ROLE_LABEL = "kiln.sandbox.role"
IMAGE_REPO = "kiln-node"
MAX_NODES = 89  # .11 .. .99; the rest of the subnet stays free for other tools

DEFAULT_STATE_DIR = "~/.kiln"


def node_name(index: int) -> str:
    """The compute node name for 1-based `index`: kiln-node01, kiln-node02, ..."""
    return f"{INSTANCE}-node{index:02d}"


def address(octet: int) -> str:
    return str(ipaddress.ip_network(SUBNET).network_address + octet)


@dataclass(frozen=True)
class Node:
    name: str
    address: str
    role: str  # "controller" or "compute"


def nodes(count: int) -> list[Node]:
    """The controller and `count` compute nodes, in a fixed order with fixed addresses."""
    result = [Node(CONTROLLER, address(CONTROLLER_HOST_OCTET), "controller")]
    for index in range(1, count + 1):
        result.append(Node(node_name(index), address(CONTROLLER_HOST_OCTET + index), "compute"))
    return result


@dataclass(frozen=True)
class Paths:
    """Where the sandbox keeps its files. `display_*` are what the inventory writes."""

    state_dir: Path  # absolute
    display_state_dir: str  # "~/.kiln" when KILN_HOME is the default, else the absolute path

    @property
    def sandbox_dir(self) -> Path:
        return self.state_dir / "sandbox"

    @property
    def private_key(self) -> Path:
        return self.sandbox_dir / "id_ed25519"

    @property
    def public_key(self) -> Path:
        return self.sandbox_dir / "id_ed25519.pub"

    @property
    def known_hosts(self) -> Path:
        return self.sandbox_dir / "known_hosts"

    @property
    def inventory_dir(self) -> Path:
        return self.sandbox_dir / "inventory"

    def display(self, path: Path) -> str:
        """`path` (inside the state dir) as the inventory spells it."""
        return f"{self.display_state_dir}/{path.relative_to(self.state_dir).as_posix()}"


def paths(environ: dict[str, str] | None = None) -> Paths:
    """The state dir: $KILN_HOME, or ~/.kiln. Spelt with ~ when it is the default."""
    env = os.environ if environ is None else environ
    default = Path(os.path.expanduser(DEFAULT_STATE_DIR))
    configured = env.get("KILN_HOME", "").strip()
    if not configured:
        return Paths(default, DEFAULT_STATE_DIR)
    state_dir = Path(os.path.expanduser(configured)).resolve()
    if state_dir == default.resolve():
        return Paths(default, DEFAULT_STATE_DIR)
    return Paths(state_dir, state_dir.as_posix())
