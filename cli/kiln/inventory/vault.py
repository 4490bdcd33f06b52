"""ansible-vault, as Ansible users know it: vault ids, password files, Ansible's own VaultLib.

A VaultConfig is the list of vault identities (`label@source`, Ansible's --vault-id syntax) kiln
was given: `--vault-id` (repeatable) and `--vault-password-file` on the command line, then
ANSIBLE_VAULT_IDENTITY_LIST and ANSIBLE_VAULT_PASSWORD_FILE from the environment. kiln decrypts
with it while loading the inventory and hands the same list to ansible-playbook. Nothing here
prompts: a source must be a file (or an executable client script), never `prompt`.

Decryption and encryption are ansible.parsing.vault's (imported on first use only: `kiln --help`
does not load Ansible).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.errors import InvalidInputError

VAULT_HEADER = "$ANSIBLE_VAULT;"
PROMPTS = ("prompt", "prompt_ask_vault_pass")


class VaultError(Exception):
    """A value or file that the given vault ids cannot decrypt."""


def _identity(text: str) -> tuple[str, str]:
    label, at, source = text.partition("@")
    return (label, source) if at else ("default", text)


@dataclass(frozen=True, slots=True)
class VaultConfig:
    """The vault identities of one kiln command, in the order Ansible tries them."""

    identities: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.identities)

    @classmethod
    def build(
        cls,
        vault_ids: list[str] | tuple[str, ...] = (),
        password_file: str | Path | None = None,
        environ: dict[str, str] | None = None,
    ) -> VaultConfig:
        """Command-line ids first, then the environment's; each source checked to exist."""
        environ = environ or {}
        found: list[str] = list(vault_ids)
        if password_file:
            found.append(str(password_file))
        listed = environ.get("ANSIBLE_VAULT_IDENTITY_LIST", "")
        found += [item.strip() for item in listed.split(",") if item.strip()]
        if environ.get("ANSIBLE_VAULT_PASSWORD_FILE"):
            found.append(environ["ANSIBLE_VAULT_PASSWORD_FILE"])
        identities: list[str] = []
        for item in found:
            label, source = _identity(item)
            if source in PROMPTS or not source:
                raise InvalidInputError(
                    f"vault id {item!r} asks for a prompt; kiln never prompts for a password",
                    hint="give a file: --vault-id LABEL@FILE or --vault-password-file FILE",
                )
            path = Path(source).expanduser()
            if not path.is_file():
                raise InvalidInputError(
                    f"vault password file {source} does not exist",
                    hint="pass an existing file with --vault-password-file or --vault-id",
                )
            identity = f"{label}@{path.absolute()}"
            if identity not in identities:
                identities.append(identity)
        return cls(tuple(identities))

    @property
    def labels(self) -> list[str]:
        return [_identity(item)[0] for item in self.identities]

    def env(self) -> dict[str, str]:
        """What ansible-playbook is given: every identity, as ANSIBLE_VAULT_IDENTITY_LIST."""
        return {"ANSIBLE_VAULT_IDENTITY_LIST": ",".join(self.identities)} if self else {}

    def lib(self) -> Any:
        """ansible's VaultLib loaded with these secrets (read once per process)."""
        cached = _LIBS.get(self.identities)
        if cached is None:
            from ansible.errors import AnsibleError
            from ansible.parsing.dataloader import DataLoader
            from ansible.parsing.vault import VaultLib, get_file_vault_secret

            loader = DataLoader()
            secrets = []
            for item in self.identities:
                label, source = _identity(item)
                try:
                    secret = get_file_vault_secret(filename=source, vault_id=label, loader=loader)
                    secret.load()
                except AnsibleError as error:
                    raise InvalidInputError(
                        f"cannot read vault password {source}: {error.message}"
                    ) from None
                secrets.append((label, secret))
            cached = _LIBS[self.identities] = VaultLib(secrets)
        return cached

    def decrypt(self, ciphertext: str) -> str:
        """The plaintext of one vaulted value or file; VaultError when no id opens it."""
        if not self:
            raise VaultError("no vault password given")
        from ansible.errors import AnsibleError

        try:
            plain = self.lib().decrypt(ciphertext.strip())
        except AnsibleError:
            ids = ", ".join(self.labels)
            raise VaultError(f"cannot decrypt with the vault ids given ({ids})") from None
        return plain.decode("utf-8") if isinstance(plain, bytes) else str(plain)

    def encrypt(self, plaintext: str) -> str:
        """`plaintext` encrypted under the first vault id (for values of an encrypted file)."""
        lib = self.lib()
        label, secret = lib.secrets[0]
        data = lib.encrypt(plaintext, secret=secret, vault_id=label)
        return data.decode("ascii") if isinstance(data, bytes) else str(data)


_LIBS: dict[tuple[str, ...], Any] = {}


def is_encrypted_text(text: str) -> bool:
    """A whole file encrypted with ansible-vault."""
    return text.lstrip().startswith(VAULT_HEADER)


_ACTIVE = [VaultConfig()]


def activate(config: VaultConfig) -> None:
    """The vault of this kiln process (set once by the command from its options)."""
    _ACTIVE[0] = config


def active() -> VaultConfig:
    """The process's vault: what load_cluster and execute use when not given one."""
    return _ACTIVE[0]
