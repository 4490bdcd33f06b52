"""The node image: a minimal Debian (13 or 12) with systemd as PID 1, sshd, python3 and sudo.

Built once per release and reused. It is tagged `kiln-node:<hash of its recipe>` (and
`kiln-node:<os>`, e.g. kiln-node:debian-13, which molecule uses), so a changed recipe builds a
new image and an unchanged one is never rebuilt. Two ways to the same base
(`kiln-node-base:<hash>`): `FROM debian:<suite>` plus apt where a registry answers,
else (air-gapped, as here) debootstrap from the Debian archive, with a .deb cache under
~/.cache/kiln so rebuilds are fast. The same customisation script then runs on either base and
makes `kiln-node` on top of it: the packages the stages install downloaded, and what every
sandbox run needs installed (RUNTIME_PACKAGES: the CPU burn-in runtime), once, in a layer the
demo, the integration tier and molecule share. Roles still install (and version-check)
everything; on this image they find it there and change nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kiln.errors import EnvironmentProblem, OperationFailed
from kiln.sandbox.config import IMAGE_REPO, LABEL
from kiln.sandbox.docker import docker
from kiln.sandbox.releases import Release, chosen

Progress = Callable[..., None]

PACKAGES = ("systemd", "systemd-sysv", "python3", "openssh-server", "sudo", "iproute2")
MIRROR = os.environ.get("KILN_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get(
    "KILN_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security"
)
RECIPE_LABEL = f"{LABEL}.recipe"

# Debian packages the base, slurm and burn-in stages install; keep in step with the roles.
PREFETCH_PACKAGES = (
    "python3-apt",
    "chrony",
    "pciutils",
    "numactl",
    "ethtool",
    "rsync",
    "munge",
    "libmunge2",
    "slurm-client",
    "slurmd",
    "slurmctld",
    "prometheus-node-exporter",
)

# Installed into the image, not only downloaded: the burn-in runtime of CPU-only nodes
# (python3-torch and its ~100 dependencies, minutes to unpack on every node otherwise). Keep in
# step with roles/burnin/vars/Debian.yml (__burnin_system_packages; a unit test checks), so the
# role finds exactly these versions installed and does nothing.
RUNTIME_PACKAGES = ("python3-torch",)

# A silent build step reports that it is still running at least this often (seconds).
HEARTBEAT_S = 10.0


def customize_script(release: Release, *, bare: bool = False) -> str:
    """Runs as root inside the base image (either path); POSIX sh and idempotent. `bare`: no
    package downloaded or installed beyond the base (the air-gapped sandbox's nodes, which
    fetch every one from the mirror)."""
    suite = release.suite
    return _node_script(suite) + ("" if bare else _packages_script()) + "rm -rf /tmp/* /var/tmp/*\n"


def _node_script(suite: str) -> str:
    return f"""\
set -eu
# The whole Debian archive (contrib/non-free too: the NVIDIA stack lives there), so roles can
# apt-get install exactly as on a real server.
rm -f /etc/apt/sources.list
cat > /etc/apt/sources.list.d/debian.sources <<'SOURCES'
Types: deb
URIs: {MIRROR}
Suites: {suite} {suite}-updates
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: {SECURITY_MIRROR}
Suites: {suite}-security
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
# Services start on install, as on a real server.
rm -f /usr/sbin/policy-rc.d
# Every node gets its own identity: host keys and machine-id are made at first boot.
rm -f /etc/ssh/ssh_host_*
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
cat > /etc/systemd/system/kiln-ssh-host-keys.service <<'UNIT'
[Unit]
Description=Generate this node's own SSH host keys
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=ssh.service multi-user.target
UNIT
systemctl enable kiln-ssh-host-keys.service ssh.service
systemctl set-default multi-user.target
# Lean: a small, disk-backed journal instead of one in /run (tmpfs is memory).
mkdir -p /etc/systemd/journald.conf.d /var/log/journal
printf '[Journal]\\nStorage=persistent\\nSystemMaxUse=64M\\nRuntimeMaxUse=16M\\n' \\
  > /etc/systemd/journald.conf.d/kiln.conf
install -d -m 0700 /root/.ssh
"""


def _packages_script() -> str:
    return f"""\
# A fresh package index, and the packages the stages install downloaded (not installed) into
# the image: every container shares this layer, so N nodes download them once, not N times.
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
echo "kiln: installing {" ".join(RUNTIME_PACKAGES)}"
apt-get install -y -q --no-install-recommends {" ".join(RUNTIME_PACKAGES)}
apt-get clean
echo "kiln: downloading {len(PREFETCH_PACKAGES)} packages the stages install"
apt-get install -y -qq --download-only {" ".join(PREFETCH_PACKAGES)} >/dev/null
"""


# (`docker commit --change` refuses STOPSIGNAL on Docker 20.10: `docker run` sets it instead.)
IMAGE_CHANGES = (
    'CMD ["/lib/systemd/systemd"]',
    "ENV container=docker",
)


@dataclass(frozen=True)
class ImageResult:
    tag: str
    built: bool  # False: an image with this recipe already existed
    source: str  # "cached", "cached base image", "registry" or "debootstrap"
    seconds: float


def base_recipe(release: Release) -> dict[str, object]:
    return {"suite": release.suite, "variant": "minbase", "packages": list(PACKAGES)}


def recipe_hash(release: Release, *, bare: bool = False) -> str:
    recipe = {
        "base": base_recipe(release),
        "customize": customize_script(release, bare=bare),
        "changes": list(IMAGE_CHANGES),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def image_tag(release: Release | None = None, *, bare: bool = False) -> str:
    """The node image of `release` (default: the chosen one, kiln.sandbox.releases.chosen);
    `bare`: the one without the stages' packages (kiln-node-bare:<recipe>)."""
    repo = f"{IMAGE_REPO}-bare" if bare else IMAGE_REPO
    return f"{repo}:{recipe_hash(release or chosen(), bare=bare)}"


def os_tag(release: Release) -> str:
    """The stable name of a release's newest node image (molecule's platforms use it)."""
    return f"{IMAGE_REPO}:{release.os}"


def base_tag(release: Release) -> str:
    """The bare debootstrapped image the node image is built on (what an offline test uses:
    none of the packages the roles install are in it)."""
    recipe = json.dumps(base_recipe(release), sort_keys=True).encode()
    return f"{IMAGE_REPO}-base:{hashlib.sha256(recipe).hexdigest()[:12]}"


def _registry_base(release: Release) -> str:
    return f"debian:{release.suite}"


def _exists(ref: str) -> bool:
    return docker(["image", "inspect", ref], check=False, timeout=30).returncode == 0


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(root) / "kiln"


def debootstrap_command(rootfs: Path, debs: Path, release: Release) -> list[str]:
    return [
        "debootstrap",
        "--variant=minbase",
        f"--cache-dir={debs}",
        f"--include={','.join(PACKAGES)}",
        release.suite,
        str(rootfs),
        MIRROR,
    ]


def _registry_answers(release: Release) -> bool:
    """Use `FROM debian:<suite>` only where it is already here or a pull works quickly."""
    source = os.environ.get("KILN_SANDBOX_IMAGE_SOURCE", "auto")
    if source == "debootstrap":
        return False
    if _exists(_registry_base(release)):
        return True
    return docker(["pull", _registry_base(release)], check=False, timeout=60).returncode == 0


def _base_from_registry(tag: str, progress: Progress, release: Release) -> None:
    install = (
        "set -eu; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
        f"apt-get install -y -q --no-install-recommends {' '.join(PACKAGES)}"
    )
    _run_and_commit(_registry_base(release), install, tag, (), progress, "base image")


def _base_from_debootstrap(tag: str, progress: Progress, release: Release) -> None:
    if shutil.which("debootstrap") is None:
        raise EnvironmentProblem(
            "debootstrap is not installed (needed to build the node image without a registry)",
            hint="run scripts/ensure-docker.sh as root (installs docker.io and debootstrap)",
        )
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "building the node image with debootstrap needs root",
            hint=(
                "run `kiln sandbox up` once as root, or make "
                f"`docker pull {_registry_base(release)}` work"
            ),
        )
    debs = cache_dir() / "debootstrap-debs"
    debs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=cache_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = debootstrap_command(rootfs, debs, release)
        rc, tail = stream(cmd, "debootstrap", progress, timeout=900)
        if rc != 0:
            raise OperationFailed(f"debootstrap failed (rc {rc}): " + " | ".join(tail[-5:]))
        progress("importing the root filesystem into Docker")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["docker", "import", "-", tag], stdin=tar.stdout, capture_output=True, text=True
        )
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise OperationFailed(f"docker import failed: {imported.stderr.strip()}")


def stream(
    cmd: list[str],
    what: str,
    progress: Progress,
    *,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[int, list[str]]:
    """Run `cmd`, passing each output line to `progress(..., detail=True)` and, while it prints
    nothing, `<what>: still running (Ns)` every HEARTBEAT_S seconds; (rc, last 20 lines)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    done = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    start, told = clock(), float("-inf")
    shown = 0
    # Something every HEARTBEAT_S / 2: the newest line, or that it still runs. A log's printer
    # may drop lines that come too close together (commands.sandbox.plain_progress), so "a line
    # arrived" is not "a line was shown"; a steady beat keeps the log's gaps short either way.
    while not done.wait(min(1.0, HEARTBEAT_S / 4)):
        now = clock()
        if now - start > timeout:
            proc.kill()
            raise OperationFailed(f"{what} did not finish within {timeout:.0f}s")
        if now - told < HEARTBEAT_S / 2:
            continue
        told = now
        if len(lines) > shown:
            shown = len(lines)
            progress(f"{what}: {lines[-1]}", detail=True)
        else:
            progress(f"{what}: still running ({now - start:.0f}s)", detail=True)
    reader.join()
    return proc.wait(), lines[-20:]


def _run_and_commit(
    image: str,
    script: str,
    tag: str,
    changes: tuple[str, ...],
    progress: Progress,
    what: str,
) -> None:
    name = f"kiln-build-{os.getpid()}"
    docker(["rm", "-f", name], check=False)
    try:
        cmd = ["docker", "run", "--name", name, "--network", "bridge", image]
        rc, tail = stream([*cmd, "/bin/sh", "-c", script], what, progress, timeout=1800)
        if rc != 0:
            raise OperationFailed(f"building the {what} failed (rc {rc}): " + " | ".join(tail[-5:]))
        change_args = [arg for change in changes for arg in ("--change", change)]
        commit = ["docker", "commit", *change_args, name, tag]
        rc, tail = stream(commit, f"saving the {what}", progress, timeout=900)
        if rc != 0:
            raise OperationFailed(f"docker commit of the {what} failed: " + " | ".join(tail[-3:]))
    finally:
        docker(["rm", "-f", name], check=False)


def ensure_image(
    progress: Progress,
    release: Release | None = None,
    *,
    rebuild: bool = False,
    bare: bool = False,
) -> ImageResult:
    """The node image of `release` (default: the chosen one), built only when not there yet;
    `bare`: without the stages' packages (customize_script)."""
    release = release or chosen()
    start = time.monotonic()
    tag = image_tag(release, bare=bare)
    if _exists(tag) and not rebuild:
        if not bare:
            docker(["tag", tag, os_tag(release)])
        return ImageResult(tag, built=False, source="cached", seconds=time.monotonic() - start)
    base = base_tag(release)
    source = "cached base image"
    if rebuild or not _exists(base):
        if _registry_answers(release):
            source = "registry"
            progress(f"building the base image from {_registry_base(release)}")
            _base_from_registry(base, progress, release)
        else:
            source = "debootstrap"
            progress(
                f"building the {release.name} base image with debootstrap from the Debian "
                "archive (~40 s)"
            )
            _base_from_debootstrap(base, progress, release)
    progress(
        f"building the bare node image {tag} on {base} (no packages beyond the base)"
        if bare
        else f"building the node image {tag} on {base}: prefetching packages and installing "
        f"{', '.join(RUNTIME_PACKAGES)} (once; a few minutes, then cached)"
    )
    recipe = recipe_hash(release, bare=bare)
    changes = (*IMAGE_CHANGES, f"LABEL {LABEL}=1 {RECIPE_LABEL}={recipe}")
    script = customize_script(release, bare=bare)
    _run_and_commit(base, script, tag, changes, progress, "node image")
    if not bare:
        docker(["tag", tag, os_tag(release)])
    return ImageResult(tag, built=True, source=source, seconds=time.monotonic() - start)
