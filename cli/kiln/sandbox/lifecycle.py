"""`up`, `down` and `status` of the sandbox: each returns a result object and never prints.

Progress goes through the `progress(message, detail=False)` callback the command passes in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kiln.errors import InvalidInputError
from kiln.sandbox import cluster, host_limits, image, inventory, light, mirror, ssh
from kiln.sandbox.config import MAX_NODES, NETWORK, Paths, nodes
from kiln.sandbox.docker import require_docker
from kiln.sandbox.releases import Release, chosen

Progress = Callable[..., None]


def _quiet(message: str, *, detail: bool = False) -> None:
    """The default progress callback: discard."""


@dataclass
class NodeResult:
    name: str
    address: str
    action: str  # created, started, reused, recreated
    systemd: str


@dataclass
class UpResult:
    inventory_dir: Path
    release: Release
    image: image.ImageResult
    nodes: list[NodeResult] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # surplus compute nodes from a larger `up`
    seconds: float = 0.0


@dataclass
class DownResult:
    removed: list[str]
    network_removed: bool


@dataclass
class StatusRow:
    name: str
    address: str
    state: str
    systemd: str


def up(
    count: int,
    paths: Paths,
    progress: Progress = _quiet,
    *,
    release: Release | None = None,
    rebuild: bool = False,
    bundle: Path | None = None,
) -> UpResult:
    """Bring up a controller and `count` compute nodes of `release` (default: the chosen one),
    trusted over SSH, with an inventory. Nodes of another release are replaced. With `bundle`
    (kiln mirror fetch's), the sandbox has no route out and a mirror serves the bundle
    (kiln.sandbox.mirror); its inventory sets kiln_mirror."""
    if not 1 <= count <= MAX_NODES:
        raise InvalidInputError(f"--nodes must be between 1 and {MAX_NODES}, not {count}")
    release = release or chosen()
    start = time.monotonic()
    require_docker()
    wanted = nodes(count)
    running = {c.name for c in cluster.containers() if c.state == "running"}
    host_limits.require_inotify_headroom(len({n.name for n in wanted} - running))
    # air-gapped: nodes with no package beyond the base, so every one comes from the mirror
    img = image.ensure_image(progress, release, rebuild=rebuild, bare=bundle is not None)
    if img.built:
        progress(f"built {img.tag} from {img.source} in {img.seconds:.0f}s")

    internal = mirror.network_is_internal()
    if internal is not None and internal != (bundle is not None):
        raise InvalidInputError(
            f"the sandbox network {NETWORK} exists {'without' if internal else 'with'} a route "
            f"out; `kiln sandbox up` {'with' if bundle else 'without'} --mirror needs the other",
            hint="`kiln sandbox down` first, or run the other one beside it (KILN_SANDBOX=name)",
        )
    cluster.ensure_network(internal=bundle is not None)
    mirror_at = mirror.ensure_mirror(bundle, img.tag) if bundle else None
    if mirror_at:
        progress(f"{mirror.MIRROR}: serving {bundle} at {mirror.mirror_url(mirror_at)}")
    existing = {c.name: c for c in cluster.containers() if c.role != mirror.ROLE}
    removed = sorted(set(existing) - {n.name for n in wanted})
    for name in removed:
        progress(f"removing {name} (not part of a {count}-node sandbox)")
        cluster.remove_container(name)
    actions = {}
    for node in wanted:
        found = existing.get(node.name)
        if found is not None and found.limits:
            progress(f"{node.name}: left with {', '.join(found.limits)} (kiln sets none)")
        actions[node.name] = cluster.ensure_container(node, img.tag, found)
        progress(f"{node.name}: {actions[node.name]}")

    ssh.ensure_keypair(paths.private_key)
    lines, results = [], []
    for node in wanted:
        progress(f"waiting for systemd and sshd on {node.name}")
        state = cluster.wait_ready(node, progress=progress)
        ssh.authorize(node, paths.public_key)
        lines.append(ssh.known_hosts_line(node, ssh.host_key(node)))
        results.append(NodeResult(node.name, node.address, actions[node.name], state))
    ssh.write_known_hosts(paths.known_hosts, lines)
    url = mirror.mirror_url(mirror_at) if mirror_at else None
    inventory.write(paths.inventory_dir, count, paths, release, url)

    for node in wanted:
        progress(f"proving ssh with host key checking to {node.name}")
        ssh.prove(node, paths.private_key, paths.known_hosts)
    return UpResult(paths.inventory_dir, release, img, results, removed, time.monotonic() - start)


def down() -> DownResult:
    """Remove the containers and the network, light hosts included; the image and the keys
    stay."""
    require_docker()
    names = [c.name for c in cluster.containers()]
    for name in names:
        cluster.remove_container(name)
    return DownResult(names + light.down(), cluster.remove_network())


def status() -> list[StatusRow]:
    require_docker()
    rows = []
    for c in cluster.containers():
        systemd = cluster.systemd_state(c.name) if c.state == "running" else "-"
        rows.append(StatusRow(c.name, c.address or "-", c.state, systemd))
    return rows
