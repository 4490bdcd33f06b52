"""SSH settings from inventory variables, and known_hosts handling with throwaway keys."""

from __future__ import annotations

import getpass
from pathlib import Path

import paramiko
import pytest

from kiln.errors import InvalidInputError
from kiln.fleet.knownhosts import KnownHosts
from kiln.fleet.ssh import parse_jump, parse_ssh_args, settings_for

HOME = Path.home()


def test_options_from_realistic_common_and_extra_args():
    common = (
        "-o UserKnownHostsFile=~/.kiln/prod/known_hosts -o StrictHostKeyChecking=yes "
        "-o ProxyJump=admin@bastion.example.org:2222 -o ControlMaster=auto "
        "-o ControlPersist=60s"
    )
    extra = "-oPort=2200 -o 'ProxyCommand ssh -W %h:%p other' -i ~/other_key -J ignored -l ops"
    assert parse_ssh_args(common, extra) == {
        "userknownhostsfile": "~/.kiln/prod/known_hosts",
        "stricthostkeychecking": "yes",
        "proxyjump": "admin@bastion.example.org:2222",  # first value wins, as in ssh
        "controlmaster": "auto",
        "controlpersist": "60s",
        "port": "2200",
        "proxycommand": "ssh -W %h:%p other",
        "identityfile": "~/other_key",
        "user": "ops",
    }
    assert parse_ssh_args(None, "") == {}


def test_settings_follow_ansible_precedence_and_expand_home():
    hostvars = {
        "ansible_host": "10.1.0.7",
        "ansible_user": "root",
        "ansible_port": 2022,
        "ansible_ssh_private_key_file": "~/.kiln/prod/id_ed25519",
        "ansible_ssh_common_args": (
            "-o UserKnownHostsFile='~/.kiln/prod/known_hosts /etc/kiln/known_hosts' "
            "-o StrictHostKeyChecking=no -o Port=9 -o User=nobody "
            "-o ProxyJump=admin@bastion:2222 -o ConnectTimeout=5"
        ),
    }
    settings = settings_for("gpu007", "10.1.0.7", hostvars)
    assert settings.address == "10.1.0.7"
    assert settings.port == 2022  # ansible_port beats -o Port
    assert settings.user == "root"
    assert settings.key_file == HOME / ".kiln/prod/id_ed25519"
    assert settings.known_hosts == (
        HOME / ".kiln/prod/known_hosts",
        Path("/etc/kiln/known_hosts"),
        Path("/etc/ssh/ssh_known_hosts"),
        Path("/etc/ssh/ssh_known_hosts2"),
    )
    assert settings.proxy_jump == "admin@bastion:2222"
    assert settings.connect_timeout == 5.0
    assert settings.host_key_name == "[10.1.0.7]:2022"


def test_defaults_without_any_ssh_variables():
    settings = settings_for("n1", "n1.example.org", {})
    assert (settings.port, settings.user, settings.key_file) == (22, getpass.getuser(), None)
    assert settings.known_hosts[:2] == (HOME / ".ssh/known_hosts", HOME / ".ssh/known_hosts2")
    assert settings.proxy_jump is None and settings.proxy_command is None
    assert settings.host_key_name == "n1.example.org"
    args = {"ansible_ssh_extra_args": "-o Port=2200 -o ProxyJump=none -i /k"}
    settings = settings_for("n1", "n1", args)
    assert (settings.port, settings.proxy_jump, settings.key_file) == (2200, None, Path("/k"))


def test_a_bad_port_is_invalid_input():
    with pytest.raises(InvalidInputError, match="gpu001: bad SSH setting"):
        settings_for("gpu001", "10.0.0.1", {"ansible_port": "ssh"})


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("bastion", ("bastion", 22, "me")),
        ("admin@bastion:2222", ("bastion", 2222, "admin")),
        ("admin@[fd00::1]:2222", ("fd00::1", 2222, "admin")),
    ],
)
def test_parse_jump(spec, expected):
    assert parse_jump(spec, "me") == expected


def test_known_hosts_index_plain_hashed_ports_and_junk(tmp_path):
    first, second, other = (paramiko.ECDSAKey.generate() for _ in range(3))
    hashed = paramiko.HostKeys.hash_host("gpu002")
    lines = [
        "# managed by kiln",
        "",
        f"gpu001,10.0.0.1 {first.get_name()} {first.get_base64()}",
        f"[10.0.0.1]:2222 {second.get_name()} {second.get_base64()}",
        f"{hashed} {second.get_name()} {second.get_base64()}",
        f"@cert-authority *.example.org {other.get_name()} {other.get_base64()}",
        f"@revoked gpu003 {other.get_name()} {other.get_base64()}",
        "gpu004 ssh-ed25519 not-base64!!",
        "too-few-fields",
    ]
    (tmp_path / "known_hosts").write_text("\n".join(lines) + "\n")
    index = KnownHosts.load([tmp_path / "known_hosts", tmp_path / "missing"])
    assert index.files == [tmp_path / "known_hosts"]
    assert index.lookup("gpu001") == [first]
    assert index.lookup("10.0.0.1") == [first]
    assert index.lookup("[10.0.0.1]:2222") == [second]  # a port other than 22 is its own name
    assert index.lookup("gpu002") == [second]  # hashed entry
    assert index.lookup("gpu003") == []  # only marker lines: unknown, so refused
    assert index.lookup("x.example.org") == []
    assert index.lookup("gpu004") == []


# --- transient faults are tried again; answers never are ---------------------------------------


class _FlakyConnect:
    """A stand-in connect: raises each of `errors` in turn, then returns "client"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "client"


def _retry(attempt, slept):
    from kiln.fleet.connect import with_retries

    return with_retries(attempt, sleep=slept.append)


@pytest.mark.parametrize(
    "error",
    [
        TimeoutError("timed out"),
        ConnectionRefusedError(111, "Connection refused"),
        ConnectionResetError(104, "Connection reset by peer"),
        paramiko.ssh_exception.NoValidConnectionsError({("10.0.0.2", 22): OSError(111, "x")}),
        paramiko.SSHException("Error reading SSH protocol banner"),
        paramiko.ChannelException(2, "Connect failed"),
    ],
)
def test_a_transient_fault_once_is_retried_after_a_pause(error):
    slept: list[float] = []
    connect = _FlakyConnect(error)
    assert _retry(connect, slept) == "client"
    assert connect.calls == 2 and slept == [1.0]


def test_three_tries_with_backoff_then_the_fault_is_reported():
    slept: list[float] = []
    connect = _FlakyConnect(*(TimeoutError("timed out") for _ in range(3)))
    with pytest.raises(TimeoutError):
        _retry(connect, slept)
    assert connect.calls == 3 and slept == [1.0, 2.0]


@pytest.mark.parametrize(
    "error",
    [
        paramiko.AuthenticationException("Authentication failed."),
        paramiko.ChannelException(1, "Administratively prohibited"),
        paramiko.SSHException("Incompatible ssh peer"),
    ],
)
def test_auth_failures_and_answers_are_never_retried(error):
    slept: list[float] = []
    connect = _FlakyConnect(error)
    with pytest.raises(type(error)):
        _retry(connect, slept)
    assert connect.calls == 1 and slept == []


def test_host_key_problems_and_unknown_names_are_never_retried():
    import socket

    from kiln.fleet.connect import JumpHostError, UnknownHostKey, transient

    key = paramiko.RSAKey.generate(1024)
    other = paramiko.RSAKey.generate(1024)
    assert not transient(paramiko.BadHostKeyException("n1", key, other))
    assert not transient(UnknownHostKey("unknown host key for n1"))
    assert not transient(socket.gaierror(-2, "Name or service not known"))
    assert not transient(JumpHostError("jump host bastion: SSH login refused"))


def test_connector_connect_retries_a_timeout_once(monkeypatch):
    """Connector.connect, with its login patched: one timeout under load, then connected."""
    from kiln.fleet import connect as connect_module

    slept: list[float] = []
    monkeypatch.setattr(connect_module.time, "sleep", slept.append)
    connector = connect_module.Connector()
    login = _FlakyConnect(TimeoutError("timed out"))
    monkeypatch.setattr(connector, "_login", lambda *args: login())
    settings = settings_for("n1", "10.0.0.2", {})
    assert connector.connect(settings, 5.0) == "client"
    assert login.calls == 2 and slept == [1.0]
