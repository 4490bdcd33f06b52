"""An air-gapped sandbox: its network has no route out, and a mirror container serves a bundle.

    address = ensure_mirror(bundle, image)   # <instance>-mirror at .5, serving on port 8080
    mirror_url(address)                      # what the inventory's kiln_mirror.url is

`kiln sandbox up --mirror BUNDLE` creates the network with `--internal` (Docker gives it no
route beyond its own containers; the host still reaches them, for SSH) and starts the mirror
from the node image's Debian with kiln's own server (`python3 -m kiln.artifacts.serve`, the
standard library alone, from kiln's source mounted read-only). Its access log is the
container's output: `docker logs <instance>-mirror`, what the nodes fetched.
"""

from __future__ import annotations

from pathlib import Path

from kiln.errors import InvalidInputError
from kiln.sandbox.config import INSTANCE, LABEL, NETWORK, ROLE_LABEL, address
from kiln.sandbox.docker import docker

MIRROR = f"{INSTANCE}-mirror"
MIRROR_OCTET = 5
PORT = 8080
ROLE = "mirror"
_SOURCE = Path(__file__).resolve().parents[2]  # the folder that holds the kiln package


def mirror_url(at: str) -> str:
    return f"http://{at}:{PORT}"


def run_command(bundle: Path, image: str) -> list[str]:
    return [
        "run", "--detach", "--name", MIRROR, "--hostname", MIRROR,
        "--network", NETWORK, "--ip", address(MIRROR_OCTET),
        "--label", f"{LABEL}={INSTANCE}", "--label", f"{ROLE_LABEL}={ROLE}",
        "-v", f"{bundle}:/srv/bundle:ro", "-v", f"{_SOURCE / 'kiln'}:/opt/kiln-src/kiln:ro",
        "--env", "PYTHONPATH=/opt/kiln-src",
        image, "python3", "-m", "kiln.artifacts.serve", "/srv/bundle", "--port", str(PORT),
    ]  # fmt: skip


def ensure_mirror(bundle: Path, image: str) -> str:
    """The mirror serving `bundle` (a new container each time: the bundle may have changed);
    its address."""
    bundle = bundle.resolve()
    if not (bundle / "bundle.json").is_file():
        raise InvalidInputError(
            f"{bundle} is not a kiln bundle (no bundle.json)",
            hint="make one with `kiln mirror plan INVENTORY --json > plan.json` and "
            "`kiln mirror fetch plan.json --to DIR`",
        )
    docker(["rm", "--force", MIRROR], check=False)
    docker(run_command(bundle, image))
    return address(MIRROR_OCTET)


def network_is_internal() -> bool | None:
    """Whether the sandbox network has no route out; None when it does not exist."""
    proc = docker(["network", "inspect", "--format", "{{.Internal}}", NETWORK], check=False)
    return None if proc.returncode != 0 else proc.stdout.strip() == "true"
