"""What keeps a run's secrets out of its record: the private inventories, the redaction, the vault.

RunSecrets, for one execute(): refuses to start when the inventory holds vaulted values and no
vault id was given (ansible-playbook would fail on the first one; kiln never prompts); while the
run lasts, makes every file kiln and ansible-runner create private (umask 077: 0700 directories,
0600 files) and keeps the inventories Ansible reads, which hold the secrets, in a private
temporary directory outside the state directory, removed afterwards. The record gets redacted
copies, and every event line, failure message and summary goes through the same redact().
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from kiln.errors import InvalidInputError
from kiln.inventory.redact import redact, secret_keys, secret_strings
from kiln.inventory.vault import VaultConfig


class RunSecrets:
    def __init__(
        self, secrets: set[str], vault: VaultConfig | None, keys: frozenset[str] = frozenset()
    ) -> None:
        self.secrets = secrets
        self.keys = keys  # variables holding values from an encrypted source
        self.vault = vault or VaultConfig()
        self.private: Path | None = None
        self._umask: int | None = None

    @classmethod
    def for_plan(cls, plan: Any, vault: VaultConfig | None) -> RunSecrets:
        secrets = secret_strings(node.hostvars for node in plan.cluster.nodes)
        keys = secret_keys(node.hostvars for node in plan.cluster.nodes)
        if secrets and not vault:
            raise InvalidInputError(
                "the inventory holds ansible-vault encrypted values and no vault password "
                "was given; nothing was touched",
                hint="pass --vault-password-file FILE or --vault-id LABEL@FILE (or set "
                "ANSIBLE_VAULT_PASSWORD_FILE); kiln never prompts for it",
            )
        return cls(secrets, vault, keys)

    def __enter__(self) -> RunSecrets:
        self._umask = os.umask(0o077)
        self.private = Path(tempfile.mkdtemp(prefix="kiln-run-"))
        return self

    def __exit__(self, *exc: object) -> None:
        if self.private is not None:
            shutil.rmtree(self.private, ignore_errors=True)
            self.private = None
        if self._umask is not None:
            os.umask(self._umask)
            self._umask = None

    def redact(self, value: Any) -> Any:
        return redact(value, self.secrets, self.keys)

    def env(self) -> dict[str, str]:
        """ansible-playbook's vault settings."""
        return self.vault.env()

    def write_inventory(self, text: str, record_copy: Path, name: str) -> Path:
        """The inventory for Ansible, privately; a redacted copy into the run record."""
        record_copy.parent.mkdir(parents=True, exist_ok=True)
        if self.private is None:  # outside a run (tests): the record's copy is the inventory
            record_copy.write_text(text)
            return record_copy
        record_copy.write_text(json.dumps(self.redact(json.loads(text)), indent=1) + "\n")
        path = self.private / name / "hosts.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path
