"""The vault options every command that reads the inventory or runs Ansible takes.

`--vault-id LABEL@FILE` (repeatable) and `--vault-password-file FILE`, as ansible-playbook
has them, then ANSIBLE_VAULT_IDENTITY_LIST and ANSIBLE_VAULT_PASSWORD_FILE from the environment.
No prompt, ever: a source must be a file (or an executable that prints the password).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from kiln.inventory.vault import VaultConfig, activate

VaultIds = Annotated[
    list[str] | None,
    typer.Option(
        "--vault-id",
        help="A vault identity LABEL@FILE (or FILE), as ansible-playbook takes it; repeatable.",
        show_default=False,
    ),
]
VaultPasswordFile = Annotated[
    Path | None,
    typer.Option(
        "--vault-password-file",
        help="The vault password file (the 'default' vault id).",
        show_default=False,
    ),
]


def use_vault(vault_id: list[str] | None, vault_password_file: Path | None) -> VaultConfig:
    """The command's vault: its options, then the environment's; kept for the whole process
    (the inventory loader and every Ansible run of the command use it). Exit 2 on a missing
    file or a `prompt` source."""
    config = VaultConfig.build(vault_id or (), vault_password_file, dict(os.environ))
    activate(config)
    return config
