"""One redaction for everything kiln writes or prints about a run: records, events, JSON, logs.

Redacted: the value of every secret key (the schema's `secret` keys, Ansible's connection
passwords), wherever it sits in a mapping; every vault value (kiln's VaultValue and Ansible's
JSON form {"__ansible_vault": ...}); any ansible-vault ciphertext inside a string; and each
secret's plaintext or ciphertext known from the inventory, wherever a string quotes it (a task
that echoed it in an error message).

Every value that came from an encrypted source is a secret: a `!vault` value, and every value
of a whole ansible-vault encrypted file (sealed while loading: kiln.inventory.yamlfile.Sealed).
The keys that hold them (secret_keys) are redacted like the secret keys, and their text, from
SHORTEST characters on, wherever a string quotes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from kiln.inventory.schema import ANSIBLE_SECRETS, KEYS
from kiln.inventory.yamlfile import Sealed, VaultValue

REDACTED = "<redacted>"
SECRET_KEYS = frozenset(
    (
        *ANSIBLE_SECRETS,
        "ansible_ssh_password",
        "ansible_become_pass",
        *(key for key, spec in KEYS.items() if spec.kind == "secret"),
    )
)
# An ansible-vault ciphertext: its header, then lines of hex (a value's indentation included).
CIPHERTEXT = re.compile(r"\$ANSIBLE_VAULT;[^\s\"']*(?:(?:\s|\\n)+[0-9a-fA-F]{2,})*")
SHORTEST = 4  # a known secret shorter than this is not searched for inside strings


def secret_strings(values: Iterable[Any]) -> set[str]:
    """Every plaintext and ciphertext held by the vault values among `values` (and inside them)."""
    found: set[str] = set()
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, VaultValue):
            found.add(value.ciphertext.strip())
            if value.plaintext:
                found.add(value.plaintext.strip())
        elif isinstance(value, Sealed):
            found.add(str(value).strip())
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
    return {text for text in found if len(text) >= SHORTEST}


def _encrypted(value: Any) -> bool:
    """`value` is, or holds, a value from an encrypted source."""
    if isinstance(value, VaultValue | Sealed):
        return True
    if isinstance(value, dict):
        return any(_encrypted(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_encrypted(item) for item in value)
    return False


def secret_keys(variables: Iterable[dict]) -> frozenset[str]:
    """The variable names whose value (in any of `variables`, each a host's variables) came
    from an encrypted source, in whole or in part."""
    return frozenset(
        str(key) for mapping in variables for key, value in mapping.items() if _encrypted(value)
    )


def redact(value: Any, secrets: Iterable[str] = (), keys: Iterable[str] = ()) -> Any:
    """`value` (JSON-like data or a string) with every secret replaced by <redacted>.

    `secrets` are the known plaintexts and ciphertexts (secret_strings of the inventory);
    `keys`, names whose values are secret besides SECRET_KEYS (secret_keys of the inventory).
    Returns new containers; the input is not changed.
    """
    known = sorted({s for s in secrets if len(s) >= SHORTEST}, key=len, reverse=True)
    return _redact(value, known, SECRET_KEYS | frozenset(keys))


def _redact(value: Any, known: list[str], keys: frozenset[str]) -> Any:
    if isinstance(value, VaultValue | Sealed):
        return REDACTED
    if isinstance(value, str):
        return _text(value, known)
    if isinstance(value, dict):
        if "__ansible_vault" in value:
            return REDACTED
        return {
            key: REDACTED if str(key) in keys else _redact(item, known, keys)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(item, known, keys) for item in value]
    return value


def _text(text: str, known: list[str]) -> str:
    if "$ANSIBLE_VAULT;" in text:
        text = CIPHERTEXT.sub(REDACTED, text)
    for secret in known:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text
