"""A site's Slurm repository served on a sandbox instance's network: a container of the node
image at a fixed address runs a build script (tests/integration/files/) that fills /srv/repo
with a signed flat apt repository, then serves it over HTTP."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path


def _docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", *argv], capture_output=True, text=True, check=check, timeout=900
    )


def serve_repository(instance: str, script: Path, *args: str) -> tuple[str, list[str]]:
    """(the repository's URL, the lines the build script printed): container `<instance>-repo`
    on `<instance>-sandbox`, from the image of `<instance>-ctl`. Remove it with `remove`."""
    container = f"{instance}-repo"
    image = _docker("inspect", "--format", "{{.Config.Image}}", f"{instance}-ctl").stdout.strip()
    network = f"{instance}-sandbox"
    subnet = _docker(
        "network", "inspect", "--format", "{{(index .IPAM.Config 0).Subnet}}", network
    ).stdout.strip()
    address = str(ipaddress.ip_network(subnet).network_address + 5)
    remove(instance)
    _docker("run", "--detach", "--name", container, "--network", network, "--ip", address,
            image, "sleep", "infinity")  # fmt: skip
    _docker("cp", str(script), f"{container}:/srv-build.py")
    built = _docker("exec", container, "python3", "/srv-build.py", *args, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    _docker("exec", "--detach", container,
            "python3", "-m", "http.server", "80", "--directory", "/srv/repo")  # fmt: skip
    return f"http://{address}/", built.stdout.strip().splitlines()


def remove(instance: str) -> None:
    _docker("rm", "--force", f"{instance}-repo", check=False)
