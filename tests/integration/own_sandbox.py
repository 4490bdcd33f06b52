"""A sandbox instance of a test module's own (KILN_SANDBOX=<instance>, so the shared sandbox
keeps what the other tests expect), and a site's Slurm repository served on its network: a
container of the node image at a fixed address runs a build script (tests/integration/files/)
that fills /srv/repo with a signed flat apt repository, then serves it over HTTP."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kiln.errors import KilnError
from kiln.sandbox.docker import require_docker

KILN = str(Path(sys.executable).parent / "kiln")


@contextmanager
def own_sandbox(instance: str, nodes: int, home: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """(the environment that names the instance and KILN_HOME, its inventory directory): the
    instance up with `nodes` compute nodes; its repository container and the instance are gone
    afterwards, whatever happened."""
    try:
        require_docker()
    except KilnError as error:
        pytest.skip(f"Docker is not available: {error.message} ({error.hint})")
    env = {**os.environ, "KILN_SANDBOX": instance, "KILN_HOME": str(home)}
    up = _kiln("sandbox", "up", "--nodes", str(nodes), env=env)
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        yield env, Path(up.stdout.strip())
    finally:
        remove(instance)
        _kiln("sandbox", "down", env=env)


def _kiln(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KILN, *args], capture_output=True, text=True, env=env, timeout=900, check=False
    )


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
    _docker("cp", str(script.with_name("flat_repo.py")), f"{container}:/flat_repo.py")
    built = _docker("exec", container, "python3", "/srv-build.py", *args, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    _docker("exec", "--detach", container,
            "python3", "-m", "http.server", "80", "--directory", "/srv/repo")  # fmt: skip
    return f"http://{address}/", built.stdout.strip().splitlines()


def remove(instance: str) -> None:
    _docker("rm", "--force", f"{instance}-repo", check=False)
