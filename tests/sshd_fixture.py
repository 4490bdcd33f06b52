"""A throwaway OpenSSH server on loopback addresses, for SSH tests and benches without Docker.

sshd listens on one free port at each given 127.0.0.x address (Linux routes all of 127.0.0.0/8
to lo), with its own host key, authorized_keys and config in a temporary directory; one sshd
process per 16 addresses, sshd's limit of listen sockets.
`write_inventory` points inventory hosts at those addresses, with a known_hosts listing the
host key under each `[127.0.0.x]:port`, so host key checking stays on as in production.

Needs /usr/sbin/sshd (Debian: `apt-get install openssh-server`); the `sshd` fixture skips with
that reason when it is missing. Import it into a test module: `from sshd_fixture import sshd`.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")
MISSING = f"{SSHD} is missing: apt-get install openssh-server"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, capture_output=True,
    )  # fmt: skip
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


@dataclass
class Sshd:
    root: Path
    port: int
    addresses: list[str]
    client_key: Path
    host_key: str  # "ssh-ed25519 AAAA..."
    processes: list[subprocess.Popen]

    def known_hosts(self, addresses: Sequence[str], path: Path) -> Path:
        path.write_text("".join(f"[{a}]:{self.port} {self.host_key}\n" for a in addresses))
        return path

    def write_inventory(
        self,
        directory: Path,
        hosts: Mapping[str, str],
        *,
        known: Sequence[str] | None = None,
        hostvars: Mapping[str, Mapping[str, object]] | None = None,
        common_args: str = "",
        user: str | None = None,
    ) -> Path:
        """DIRECTORY/inventory: the first host the controller, the others compute, all via this
        sshd. Addresses in `known` (default: all of this sshd's) go in DIRECTORY/known_hosts."""
        directory.mkdir(parents=True, exist_ok=True)
        known_hosts = self.known_hosts(
            self.addresses if known is None else known, directory / "known_hosts"
        )
        directory = directory / "inventory"
        (directory / "group_vars").mkdir(parents=True, exist_ok=True)
        lines = ["all:", "  children:"]
        names = list(hosts)
        for group, members in (("kiln_controllers", names[:1]), ("kiln_compute", names[1:])):
            lines += [f"    {group}:", "      hosts:"]
            for name in members:
                lines.append(f"        {name}:")
                extra = {"ansible_host": hosts[name], **(hostvars or {}).get(name, {})}
                lines += [f"          {key}: {value}" for key, value in extra.items()]
                lines += ["          kiln_rack: r01", "          kiln_gpu_model: none",
                          "          kiln_gpu_count: 0"]  # fmt: skip
        (directory / "hosts.yml").write_text("\n".join(lines) + "\n")
        (directory / "group_vars" / "all.yml").write_text(
            "kiln_cluster_name: loopback\n"
            f"ansible_user: {user or getpass.getuser()}\n"
            f"ansible_port: {self.port}\n"
            f"ansible_ssh_private_key_file: {self.client_key}\n"
            f"ansible_ssh_common_args: -o UserKnownHostsFile={known_hosts} "
            f"-o StrictHostKeyChecking=yes {common_args}\n"
        )
        return directory


LISTEN_LIMIT = 16  # OpenSSH's MAX_LISTEN_SOCKS


def _config(root: Path, port: int, addresses: Sequence[str], index: int, startups: int) -> Path:
    config = root / f"sshd_config.{index}"
    config.write_text(
        f"Port {port}\n"
        + "".join(f"ListenAddress {address}\n" for address in addresses)
        + f"HostKey {root / 'host_ed25519'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\n"
        f"PidFile {root / f'sshd.{index}.pid'}\n"
        "StrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "AllowTcpForwarding yes\nUseDNS no\nLogLevel ERROR\n"
        f"MaxStartups {startups}\nMaxSessions {startups}\n"
    )
    return config


def _wait(process: subprocess.Popen, address: str, port: int, log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited: {log.read_text()}")
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd did not answer on {address}:{port}: {log.read_text()}")


def start_sshd(root: Path, addresses: Sequence[str], *, max_startups: int = 100) -> Sshd:
    """Start sshd on every address at one free port; raise when it does not answer in 10 s."""
    root.mkdir(parents=True, exist_ok=True)
    host_key = _keygen(root / "host_ed25519", "throwaway-sshd")
    client_key = root / "client_ed25519"
    (root / "authorized_keys").write_text(_keygen(client_key, "kiln-test") + "\n")
    port = free_port()
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    server = Sshd(root, port, list(addresses), client_key, host_key, [])
    try:
        for index in range(0, len(addresses), LISTEN_LIMIT):
            chunk = addresses[index : index + LISTEN_LIMIT]
            config = _config(root, port, chunk, index, max_startups)
            log = root / f"sshd.{index}.log"
            with log.open("w") as stderr:
                process = subprocess.Popen(
                    [str(SSHD), "-D", "-e", "-f", str(config)], stderr=stderr
                )
            server.processes.append(process)
            _wait(process, chunk[-1], port, log)
    except BaseException:
        stop_sshd(server)
        raise
    return server


def stop_sshd(server: Sshd) -> None:
    for process in server.processes:
        process.terminate()
    for process in server.processes:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """sshd on 127.0.0.2-127.0.0.9; skipped when sshd or ssh-keygen is not installed."""
    if not SSHD.exists():
        pytest.skip(MISSING)
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is missing: apt-get install openssh-client")
    server = start_sshd(tmp_path_factory.mktemp("sshd"), [f"127.0.0.{i}" for i in range(2, 10)])
    yield server
    stop_sshd(server)
