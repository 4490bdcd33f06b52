"""The boundary to the docker CLI: every docker call goes through `docker()`."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from kiln.errors import EnvironmentProblem, OperationFailed

GET_DOCKER_HINT = (
    "run `make sandbox` or `scripts/ensure-docker.sh` (as root on Debian it installs docker.io "
    "and starts dockerd); elsewhere install Docker Engine and make `docker info` work"
)


def docker(
    args: Sequence[str],
    *,
    check: bool = True,
    input: bytes | str | None = None,
    timeout: float | None = 300,
) -> subprocess.CompletedProcess[str]:
    """Run `docker ARGS`, capturing text output; raise OperationFailed when `check` and rc != 0."""
    cmd = ["docker", *args]
    try:
        proc = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as error:
        raise EnvironmentProblem("docker is not installed", hint=GET_DOCKER_HINT) from error
    except subprocess.TimeoutExpired as error:
        raise OperationFailed(f"`{' '.join(cmd)}` did not finish within {timeout}s") from error
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise OperationFailed(
            f"`{' '.join(cmd)}` failed (rc {proc.returncode}): {detail[-1] if detail else ''}"
        )
    return proc


def require_docker() -> str:
    """The daemon's version; EnvironmentProblem (exit 3) when the CLI or the daemon is missing."""
    if shutil.which("docker") is None:
        raise EnvironmentProblem("docker is not installed", hint=GET_DOCKER_HINT)
    proc = docker(["version", "--format", "{{.Server.Version}}"], check=False, timeout=30)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise EnvironmentProblem(
            "the Docker daemon is not running (`docker version` got no server answer)",
            hint=GET_DOCKER_HINT,
        )
    return proc.stdout.strip()
