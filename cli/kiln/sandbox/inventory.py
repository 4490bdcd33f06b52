"""The sandbox's Ansible inventory: hosts.yml and group_vars/all.yml, rendered as text.

Rendered by hand, not dumped, so the files are stable byte for byte: the committed
inventories/sandbox/ must equal what `kiln sandbox up --nodes 2` writes (a unit test checks).
"""

from __future__ import annotations

from pathlib import Path

from kiln.sandbox.config import Node, Paths, nodes
from kiln.sandbox.releases import DEFAULT, RELEASES, Release

CLUSTER_NAME = "sandbox"
HEADER = "# The local sandbox cluster, written by `kiln sandbox up --nodes {n}`.\n"


def _host(node: Node) -> str:
    return (
        f"        {node.name}:\n"
        f"          ansible_host: {node.address}\n"
        f"          kiln_rack: sandbox\n"
        f"          kiln_gpu_model: none\n"
        f"          kiln_gpu_count: 0\n"
    )


def render_hosts(count: int) -> str:
    all_nodes = nodes(count)
    controllers = [n for n in all_nodes if n.role == "controller"]
    compute = [n for n in all_nodes if n.role == "compute"]
    return (
        "---\n"
        + HEADER.format(n=count)
        + "all:\n"
        + "  children:\n"
        + "    kiln_controllers:\n"
        + "      hosts:\n"
        + "".join(_host(n) for n in controllers)
        + "    kiln_compute:\n"
        + "      hosts:\n"
        + "".join(_host(n) for n in compute)
    )


def render_group_vars(
    paths: Paths, release: Release = RELEASES[DEFAULT], mirror_url: str | None = None
) -> str:
    key = paths.display(paths.private_key)
    known_hosts = paths.display(paths.known_hosts)
    return (
        "---\n"
        "# Written by `kiln sandbox up`. SSH host key checking stays on:\n"
        "# known_hosts holds the host keys read from inside each container.\n"
        f"kiln_cluster_name: {CLUSTER_NAME}\n"
        f"kiln_os: {release.os}\n"
        f"# {release.name}'s Slurm; the CPU-only nodes never load a driver, but the versions\n"
        "# must still be a combination the compatibility table and the platform accept.\n"
        "kiln_versions:\n"
        f"  driver_branch: {release.driver_branch}\n"
        f'  cuda: "{release.cuda}"\n'
        f'  nccl: "{release.nccl}"\n'
        f'  slurm: "{release.slurm}"\n'
        "# Containers share the host's cgroup tree, so Slurm confines nothing with cgroups\n"
        "# here. New nodes join quarantined (drained) as on a real cluster, until a burn-in\n"
        "# passes on them: `make demo` shows exactly that.\n"
        "kiln_slurm:\n"
        "  cgroup: false\n"
        "  quarantine_new_nodes: true\n"
        "# Docker owns a container's hostname and bind-mounts /etc/hosts, and a container may\n"
        "# not set the clock: the base role leaves those three to Docker.\n"
        "base_hostname_manage: false\n"
        "base_hosts_unsafe_writes: true\n"
        "base_chrony_start: false\n"
        "# The nodes share the host's kernel clock, which the sandbox does not manage: the\n"
        "# health check leaves time sync to the host (a site's nodes run chrony).\n"
        "kiln_health:\n"
        "  skip: [time_sync]\n"
        "ansible_user: root\n"
        "ansible_python_interpreter: /usr/bin/python3\n"
        "ansible_pipelining: true\n"
        f"ansible_ssh_private_key_file: {key}\n"
        "ansible_ssh_common_args: >-\n"
        f"  -o UserKnownHostsFile={known_hosts}\n"
        "  -o StrictHostKeyChecking=yes\n"
        + (
            "# No route out: every artifact from the sandbox's mirror (kiln sandbox up --mirror).\n"
            f"kiln_mirror:\n  url: {mirror_url}\n  offline: true\n"
            if mirror_url
            else ""
        )
    )


def render(
    count: int, paths: Paths, release: Release = RELEASES[DEFAULT], mirror_url: str | None = None
) -> dict[str, str]:
    """Relative path -> content of every file of the inventory."""
    return {
        "hosts.yml": render_hosts(count),
        "group_vars/all.yml": render_group_vars(paths, release, mirror_url),
    }


def write(
    directory: Path, count: int, paths: Paths, release: Release, mirror_url: str | None = None
) -> Path:
    """Write the inventory into `directory` (replacing those files); returns the directory."""
    for relative, content in render(count, paths, release, mirror_url).items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    return directory
