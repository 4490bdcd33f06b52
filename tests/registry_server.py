"""The CNCF distribution registry (Debian's docker-registry) on a free port, for the length of a
`with` block: what the image tests push to and pull from.

with running_registry(tmp_path, "127.0.0.1") as port:   # "0.0.0.0": reachable from the sandbox
    ...
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def running_registry(workdir: Path, listen: str) -> Iterator[int]:
    """A registry storing under `workdir`, listening on `listen`; its port once it answers."""
    port = _free_port(listen)
    settings = workdir / "registry.yml"
    settings.write_text(
        "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: "
        f"{workdir / 'store'}\nhttp:\n  addr: {listen}:{port}\n"
    )
    server = subprocess.Popen(["docker-registry", "serve", str(settings)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline, "docker-registry did not start"
            time.sleep(0.2)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)
