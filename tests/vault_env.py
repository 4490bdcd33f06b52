"""An autouse fixture for tests of vaulted inventories: no vault password from the environment,
and kiln's process-wide vault settings cleared before and after each test.

    from vault_env import no_vault_env  # noqa: F401  (imported, the fixture applies here)
"""

from __future__ import annotations

import pytest

from kiln.inventory.vault import VaultConfig, activate


@pytest.fixture(autouse=True)
def no_vault_env(monkeypatch):
    for name in ("ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_VAULT_IDENTITY_LIST"):
        monkeypatch.delenv(name, raising=False)
    activate(VaultConfig())
    yield
    activate(VaultConfig())
