"""Vaulted inventory content while loading: whole encrypted files and `!vault` values.

open_file() turns an ansible-vault encrypted file into its text (or an error naming the file);
unlock_values() fills each `!vault` value's plaintext, reporting with file:line any value the
vault ids cannot open. In a whole encrypted file, the secret keys' values (see
kiln.inventory.redact.SECRET_KEYS) are kept as vault values, encrypted again under the first
vault id, so the inventory kiln exports for Ansible never holds them in plaintext; every other
value is sealed (kiln.inventory.yamlfile.Sealed): plain to kiln, redacted from every record.
"""

from __future__ import annotations

from pathlib import Path

from kiln.inventory.findings import FindingCollector, Origin
from kiln.inventory.redact import SECRET_KEYS
from kiln.inventory.vault import VaultConfig, VaultError, is_encrypted_text
from kiln.inventory.yamlfile import VaultValue, seal

NO_PASSWORD_HINT = (
    "pass --vault-password-file FILE or --vault-id LABEL@FILE "
    "(or set ANSIBLE_VAULT_PASSWORD_FILE / ANSIBLE_VAULT_IDENTITY_LIST)"
)


def open_file(
    path: Path, text: str | None, vault: VaultConfig | None, collector: FindingCollector
) -> str | None:
    """The file's text, decrypted when the whole file is encrypted; None (reported) when it
    cannot be."""
    if text is None or not is_encrypted_text(text):
        return text
    if not vault:
        collector.error(
            "the file is encrypted with ansible-vault and no vault password was given",
            origin=Origin(path, 1),
            hint=NO_PASSWORD_HINT,
        )
        return None
    try:
        return vault.decrypt(text)
    except VaultError as error:
        collector.error(
            f"the encrypted file does not decrypt: {error}",
            origin=Origin(path, 1),
            hint="check the vault id and password the file was encrypted with",
        )
        return None


def from_encrypted_file(key: str, value: object, vault: VaultConfig) -> object:
    """A value read from a whole encrypted file (YAML or INI): a secret key's value encrypted
    again as a vault value; any other value sealed, so every record redacts it."""
    if key in SECRET_KEYS and isinstance(value, str | int | float):
        return VaultValue(vault.encrypt(str(value)), str(value))
    return seal(value)


def unlock_values(
    data: object,
    path: Path,
    vault: VaultConfig | None,
    collector: FindingCollector,
    *,
    whole_file: bool = False,
) -> None:
    """Decrypt every `!vault` value in `data` in place (with a vault); wrap a whole encrypted
    file's top-level secrets as vault values."""
    if whole_file and vault and isinstance(data, dict):
        for key, value in list(data.items()):
            data[key] = from_encrypted_file(str(key), value, vault)
    if vault:
        _walk(data, path, vault, collector, 1)


def _walk(data: object, path: Path, vault: VaultConfig, collector, line: int) -> None:
    if isinstance(data, dict):
        lines = getattr(data, "key_lines", {})
        items = list(data.items())
    elif isinstance(data, list):
        lines, items = {}, list(enumerate(data))
    else:
        return
    for key, value in items:
        at = lines.get(key, line)
        if isinstance(value, VaultValue):
            if value.plaintext is not None:
                continue
            try:
                data[key] = VaultValue(value.ciphertext, vault.decrypt(value.ciphertext))  # type: ignore[index]
            except VaultError as error:
                collector.error(
                    f"the vaulted value does not decrypt: {error}",
                    origin=Origin(path, at),
                    key=str(key),
                    hint="check the vault id and password the value was encrypted with",
                )
        else:
            _walk(value, path, vault, collector, at)
