"""The host limits a sandbox of many systemd nodes runs into, checked before any container starts.

Every node container runs systemd, and systemd takes inotify instances (about four each,
measured: 158 in use with 36 node containers up). The kernel counts them per user, and every
container's root is the host's root: at Debian's default `fs.inotify.max_user_instances` of 128
the 26th node's systemd exits at once with status 255 and nothing in its log, which `kiln
sandbox up` could only report as a node that never booted. Checked first, it is one clear error
with the command that fixes it.
"""

from __future__ import annotations

import os
from pathlib import Path

from kiln.errors import EnvironmentProblem

# Instances one more node container may take: the four measured, with room for the services
# kiln starts on it (slurmd, munge) that may watch files too.
INOTIFY_PER_NODE = 6
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def inotify_in_use(proc: Path = Path("/proc")) -> int:
    """Inotify instances open on this host, as far as this user can see (all of them, as
    root): descriptors that point at an inotify instance."""
    count = 0
    for pid in proc.iterdir():
        if not pid.name.isdigit():
            continue
        try:
            descriptors = list((pid / "fd").iterdir())
        except OSError:  # gone, or another user's
            continue
        for fd in descriptors:
            try:
                if os.readlink(fd) == "anon_inode:inotify":
                    count += 1
            except OSError:
                continue
    return count


def require_inotify_headroom(
    new_containers: int, *, limit_file: Path = INOTIFY_LIMIT, proc: Path = Path("/proc")
) -> None:
    """Refuse (exit 3) when starting `new_containers` systemd nodes would pass the host's
    inotify limit; a host without the file (not Linux) is not checked."""
    if new_containers <= 0:
        return
    try:
        limit = int(limit_file.read_text().strip())
    except (OSError, ValueError):
        return
    in_use = inotify_in_use(proc)
    needed = in_use + INOTIFY_PER_NODE * new_containers
    if needed <= limit:
        return
    suggested = max(1024, 1 << (needed * 2 - 1).bit_length())
    raise EnvironmentProblem(
        f"{new_containers} more sandbox node(s) need about {INOTIFY_PER_NODE * new_containers} "
        f"inotify instances (systemd in each), {in_use} are in use and the host allows "
        f"{limit} (fs.inotify.max_user_instances): the nodes past it would exit as they boot",
        hint=f"raise it as root: sysctl -w fs.inotify.max_user_instances={suggested} "
        "(and in /etc/sysctl.d/ to keep it), or bring up fewer nodes",
    )
