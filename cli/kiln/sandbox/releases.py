"""The Debian releases a sandbox can run: the node image's suite and what its inventory declares.

Debian 13 is the default: its Slurm (24.11) is one sites run. Debian 12 (Slurm 22.05) stays
buildable, and CI runs provision and burn-in on it too. `kiln sandbox up --os`, or
KILN_SANDBOX_OS, picks one; the image of each is cached under its own tag.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kiln.errors import InvalidInputError


@dataclass(frozen=True)
class Release:
    os: str  # the inventory's kiln_os
    suite: str  # the Debian suite debootstrap and apt use
    name: str
    # kiln_versions of the sandbox: the Slurm the release ships, and a driver, CUDA and NCCL
    # combination the compatibility table and the platform accept (CPU nodes never load them).
    driver_branch: int
    cuda: str
    nccl: str
    slurm: str


RELEASES = {
    "debian-13": Release("debian-13", "trixie", "Debian 13", 580, "13.0", "2.27.7", "24.11"),
    "debian-12": Release("debian-12", "bookworm", "Debian 12", 535, "12.2", "2.18.5", "22.05"),
}
DEFAULT = "debian-13"
ENV = "KILN_SANDBOX_OS"


def chosen(name: str | None = None, environ: dict[str, str] | None = None) -> Release:
    """The release `name` names, else $KILN_SANDBOX_OS, else the default."""
    env = os.environ if environ is None else environ
    wanted = (name or env.get(ENV, "") or DEFAULT).strip()
    try:
        return RELEASES[wanted]
    except KeyError:
        raise InvalidInputError(
            f"the sandbox runs on {', '.join(RELEASES)}, not {wanted!r}",
            hint=f"kiln sandbox up --os {DEFAULT} (or unset {ENV})",
        ) from None
