"""`kiln health` and `kiln unlock` read a vaulted inventory like every other command (issue 27):
--vault-id / --vault-password-file, then ANSIBLE_VAULT_* from the environment, never a prompt.

tests/fixtures/vault/inventory is a real ansible-vault inventory (tests/unit/test_vault.py says
how it was made): without its password, its encrypted group_vars/kiln_compute.yml makes it
invalid (exit 2) before any node is asked anything.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kiln.app import main
from kiln.fleet import CommandOutcome, ExecResult, NodeResult
from vault_env import no_vault_env  # noqa: F401  (autouse: applies here)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vault"
PASSWORD = FIXTURE / "password"
WRONG = FIXTURE / "wrong-password"
HEALTHY = json.dumps(
    {"kind": "kiln-health", "version": 2, "node": "gpu01", "ok": True, "findings": [],
     "action": {"verb": "none", "reason": "", "why": "report only"}}
)  # fmt: skip


@pytest.fixture
def inventory(tmp_path):
    """The vault fixture with its state kept locally (unlock then asks no controller)."""
    copy = tmp_path / "inventory"
    shutil.copytree(FIXTURE / "inventory", copy)
    (copy / "group_vars" / "all" / "state.yml").write_text("kiln_state:\n  backend: local\n")
    return copy


@pytest.fixture
def nodes(monkeypatch):
    """Each compute node answers the report-mode check healthy; the commands run are kept."""
    asked = []

    def run_command(selected, command, **kwargs):
        asked.append([n.name for n in selected])
        results = [NodeResult(n.name, n.name, CommandOutcome.OK, 0, HEALTHY) for n in selected]
        return ExecResult(command, results, 0.1, kwargs["fanout"], kwargs["timeout"])

    monkeypatch.setattr("kiln.commands.health.run_command", run_command)
    return asked


def run_kiln(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


def test_health_decrypts_with_the_password_file(inventory, nodes, capsys):
    code, out, err = run_kiln(
        capsys, "health", "--json", "--vault-password-file", str(PASSWORD), str(inventory)
    )
    assert code == 0, err
    assert nodes == [["gpu01", "gpu02"]]
    assert json.loads(out)["counts"] == {"healthy": 2, "unhealthy": 0, "could_not_check": 0}


def test_health_takes_a_vault_id_and_honours_the_environment(inventory, nodes, capsys, monkeypatch):
    code, _, err = run_kiln(capsys, "health", "--vault-id", f"fixture@{PASSWORD}", str(inventory))
    assert code == 0, err
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(PASSWORD))
    code, _, err = run_kiln(capsys, "health", str(inventory))
    assert code == 0, err
    assert len(nodes) == 2


@pytest.mark.parametrize("vault", [[], ["--vault-password-file", str(WRONG)]])
def test_health_without_the_right_password_asks_no_node(inventory, nodes, capsys, vault):
    code, _, err = run_kiln(capsys, "health", *vault, str(inventory))
    assert code == 2 and nodes == []
    assert "kiln_compute.yml" in err


def test_unlock_decrypts_with_the_password_file(inventory, capsys):
    code, _, err = run_kiln(
        capsys, "unlock", "--vault-password-file", str(PASSWORD), str(inventory)
    )
    assert code == 0, err
    assert "is not locked" in err
    code, _, err = run_kiln(capsys, "unlock", "--vault-id", f"x@{PASSWORD}", str(inventory))
    assert code == 0, err


def test_unlock_without_the_password_names_the_encrypted_file(inventory, capsys):
    code, _, err = run_kiln(capsys, "unlock", str(inventory))
    assert code == 2 and "kiln_compute.yml" in err
