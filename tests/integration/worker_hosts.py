"""Worker controllers for the integration tests: a sandbox container made one as docs/scale.md
describes (a venv with kiln, the inventory's SSH key and known_hosts at the same paths), and
the Receptor mesh between them set up by kiln's own playbooks/receptor.yml.

The venv is installed from wheels fetched here for the container's Python (3.13 on Debian 13,
not this machine's; containers cannot reach PyPI through this machine's proxy): about 30 s a
container.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

WORKER_VENV = "/opt/kiln-worker"
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HUB_CONTROL_PORT = 27199  # playbooks/roles/receptor_mesh: the hub's TLS control listener


def install_worker(container: str, wheels: Path, keys: tuple[Path, ...]) -> str:
    """kiln in a venv on `container`, and `keys` (the inventory's private key and known_hosts)
    at the same paths there; returns that venv's ansible-runner."""
    runner = f"{WORKER_VENV}/bin/ansible-runner"
    pip = str(BIN / "pip")
    subprocess.run([pip, "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)], check=True)
    [kiln_wheel] = wheels.glob("kiln-*.whl")
    # binary wheels of another Python do not install there
    version = subprocess.run(
        ["docker", "exec", container, "python3", "-c",
         "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    platforms = [
        arg
        for tag in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
        for arg in ("--platform", tag)
    ]
    subprocess.run(
        [pip, "download", "-q", "--only-binary=:all:", "--python-version", version,
         "--implementation", "cp", *platforms, "-c", str(ROOT / "constraints.txt"),
         "-d", str(wheels), str(kiln_wheel)],
        check=True,
    )  # fmt: skip
    # /var/tmp: Debian 13 mounts a tmpfs on /tmp, which hides what docker cp puts there
    subprocess.run(["docker", "cp", str(wheels), f"{container}:/var/tmp/kiln-wheels"], check=True)
    install = (
        "set -e; python3 -c 'import ensurepip' 2>/dev/null || (apt-get update -qq && "
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null); "
        f"rm -rf {WORKER_VENV}; python3 -m venv {WORKER_VENV}; "
        f"{WORKER_VENV}/bin/pip install -q --no-index --find-links /var/tmp/kiln-wheels kiln; "
        "rm -rf /var/tmp/kiln-wheels"
    )
    subprocess.run(["docker", "exec", container, "sh", "-c", install], check=True, timeout=900)
    # The worker reaches the nodes with the inventory's key and known_hosts, at the same paths
    # (written from inside: `docker cp` cannot reach a path under the container's /tmp tmpfs).
    for path in keys:
        write = f"umask 077; mkdir -p '{path.parent}' && cat > '{path}'"
        subprocess.run(["docker", "exec", "-i", container, "sh", "-c", write],
                       input=path.read_bytes(), check=True)  # fmt: skip
    return runner


def receptor_packaged(container: str) -> bool:
    """Whether the container's OS packages Receptor (Debian 13 does, Debian 12 does not)."""
    policy = subprocess.run(
        ["docker", "exec", container, "apt-cache", "policy", "receptor"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    return "Candidate:" in policy and "Candidate: (none)" not in policy


def set_up_mesh(inventory: Path, client: Path, env: dict[str, str] | None = None) -> str:
    """playbooks/receptor.yml on `inventory` (its hub the first controller), kiln's credentials
    fetched to `client`; returns the play's output."""
    env = {**(env or os.environ), "ANSIBLE_ROLES_PATH": str(ROOT / "playbooks" / "roles")}
    mesh = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory),
         str(ROOT / "playbooks" / "receptor.yml"), "-e", f"receptor_mesh_client_dir={client}"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert mesh.returncode == 0, mesh.stdout[-3000:] + mesh.stderr[-2000:]
    return mesh.stdout


def mesh_credentials(client: Path) -> dict[str, str]:
    """kiln_rollout.receptor's ca, cert and key, as set_up_mesh fetched them."""
    return {"ca": str(client / "ca.crt"), "cert": str(client / "kiln.crt"),
            "key": str(client / "kiln.key")}  # fmt: skip


def hub_address(inventory: Path, controller: str) -> str:
    """The ansible_host of `controller` in the inventory's hosts.yml."""
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    return hosts["all"]["children"]["kiln_controllers"]["hosts"][controller]["ansible_host"]


def inventory_keys(inventory: Path) -> tuple[Path, Path]:
    """(private key, known_hosts) the inventory's group_vars/all.yml names for SSH."""
    settings = yaml.safe_load((inventory / "group_vars" / "all.yml").read_text())
    key = Path(os.path.expanduser(settings["ansible_ssh_private_key_file"]))
    [known] = [arg.split("=", 1)[1] for arg in settings["ansible_ssh_common_args"].split()
               if arg.startswith("UserKnownHostsFile=")]  # fmt: skip
    return key, Path(os.path.expanduser(known))
