"""Vaulted secrets on the Docker sandbox, end to end (issue 18).

A copy of the sandbox inventory whose ansible_become_password and kiln_munge_key are vaulted
(`ansible-vault encrypt_string`, a password file here), provisioned (the slurm stage: munge, then
Slurm) with only ANSIBLE_VAULT_PASSWORD_FILE set: exit 0; the munge key on every container is the
declared one (the role's cross-node check also proved a controller credential decodes on every
node); neither the plaintexts nor any ciphertext appear in kiln's output or anywhere under the
state directory, and the run record is private.

Leaves the sandbox with the declared key (a later run without kiln_munge_key keeps the
controller's key, which is now this one, and copies it everywhere: Slurm keeps working).
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

VENV_BIN = Path(sys.executable).parent
KILN = str(VENV_BIN / "kiln")
CONTAINERS = ("kiln-ctl", "kiln-node01", "kiln-node02")


def encrypt_string(password_file: Path, name: str, value: str) -> str:
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-vault"),
            "encrypt_string",
            "--vault-password-file",
            str(password_file),
            "--name",
            name,
            value,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def vault_ciphertexts(vaulted: str) -> list[str]:
    """The hex lines of one value's `encrypt_string` output worth looking for in kiln's files.

    A value's last line holds what is left of its hex, as little as a few characters: a
    4-character line like '6238' turns up by chance in any file of timestamps and ids (it failed
    CI once). At 16 characters a chance match is one in 2**64, so shorter lines are left out; the
    whole ciphertext is still looked for, joined.
    """
    lines = [line.strip() for line in vaulted.splitlines() if line.startswith("  ")]
    hex_lines = [line for line in lines if not line.startswith("$ANSIBLE_VAULT")]
    joined = "".join(hex_lines)
    return [line for line in hex_lines if len(line) >= 16] + [joined]


def test_vault_ciphertexts_leave_out_a_short_last_line():
    vaulted = (
        "kiln_munge_key: !vault |\n"
        "          $ANSIBLE_VAULT;1.1;AES256\n"
        "          " + "ab" * 40 + "\n"
        "          6238\n"
    )
    assert vault_ciphertexts(vaulted) == ["ab" * 40, "ab" * 40 + "6238"]


def test_vaulted_become_password_and_munge_key_provision(provisioned_sandbox, tmp_path):
    password_file = tmp_path / "vault-password"
    password_file.write_text(secrets.token_urlsafe(24) + "\n")
    password_file.chmod(0o600)
    munge_key = base64.b64encode(secrets.token_bytes(1024)).decode()
    become_password = "kiln-become-" + secrets.token_hex(8)
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    vaulted_values = [
        encrypt_string(password_file, "kiln_munge_key", munge_key),
        encrypt_string(password_file, "ansible_become_password", become_password),
    ]
    vaulted = "".join(vaulted_values)
    group_vars.write_text(group_vars.read_text().rstrip("\n") + "\n" + vaulted)
    ciphertexts = [text for value in vaulted_values for text in vault_ciphertexts(value)]

    state = tmp_path / "state"
    env = {**os.environ, "KILN_HOME": str(state), "ANSIBLE_VAULT_PASSWORD_FILE": str(password_file)}
    env.pop("ANSIBLE_VAULT_IDENTITY_LIST", None)
    proc = subprocess.run(
        [KILN, "provision", str(inventory), "--stages", "slurm", "--yes", "--json"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    for container in CONTAINERS:
        key = subprocess.run(
            ["docker", "exec", container, "base64", "-w0", "/etc/munge/munge.key"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert key == munge_key, f"{container} has another munge key"

    forbidden = [munge_key, become_password, "$ANSIBLE_VAULT", *ciphertexts]
    output = proc.stdout + proc.stderr
    assert not [s for s in forbidden if s in output], "a secret reached kiln's output"
    files = [path for path in state.rglob("*") if path.is_file()]
    assert files, "the run left no record"
    for path in files:
        text = path.read_text(errors="replace")
        leaked = [s[:20] for s in forbidden if s in text]
        assert not leaked, f"{path} holds {leaked}"
    record = next((state / "runs").iterdir())
    assert stat.S_IMODE(record.stat().st_mode) == 0o700
    assert stat.S_IMODE((record / "summary.json").stat().st_mode) == 0o600


def test_vaulted_values_without_a_password_exit_2_before_touching_anything(
    provisioned_sandbox, tmp_path
):
    password_file = tmp_path / "vault-password"
    password_file.write_text("only-here\n")
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    vaulted = encrypt_string(password_file, "ansible_become_password", "not-used")
    group_vars.write_text(group_vars.read_text().rstrip("\n") + "\n" + vaulted)
    env = {**os.environ, "KILN_HOME": str(tmp_path / "state")}
    for name in ("ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_VAULT_IDENTITY_LIST"):
        env.pop(name, None)
    proc = subprocess.run(
        [KILN, "provision", str(inventory), "--stages", "slurm", "--yes"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    assert "no vault password" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "state" / "runs").exists()
