"""One redaction for everything kiln writes or prints about a run: records, events, JSON, logs.

Redacted: the value of every secret key (the schema's `secret` keys, Ansible's connection
passwords), wherever it sits in a mapping; every vault value (kiln's VaultValue and Ansible's
JSON form {"__ansible_vault": ...}); any ansible-vault ciphertext inside a string; and each
secret's plaintext or ciphertext known from the inventory, wherever a string quotes it (a task
that echoed it in an error message).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from kiln.inventory.schema import ANSIBLE_SECRETS, KEYS
from kiln.inventory.yamlfile import VaultValue

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
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
    return {text for text in found if len(text) >= SHORTEST}


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """`value` (JSON-like data or a string) with every secret replaced by <redacted>.

    `secrets` are the known plaintexts and ciphertexts (secret_strings of the inventory).
    Returns new containers; the input is not changed.
    """
    known = sorted({s for s in secrets if len(s) >= SHORTEST}, key=len, reverse=True)
    return _redact(value, known)


def _redact(value: Any, known: list[str]) -> Any:
    if isinstance(value, str):
        return _text(value, known)
    if isinstance(value, VaultValue):
        return REDACTED
    if isinstance(value, dict):
        if "__ansible_vault" in value:
            return REDACTED
        return {
            key: REDACTED if str(key) in SECRET_KEYS else _redact(item, known)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(item, known) for item in value]
    return value


def _text(text: str, known: list[str]) -> str:
    if "$ANSIBLE_VAULT;" in text:
        text = CIPHERTEXT.sub(REDACTED, text)
    for secret in known:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text
