"""Signatures a bundle is checked with: gpgv over a repository's signed index, and the keys
the plan fetches for each role (what that role's repository is checked with).

    verify_signature(Path("InRelease"), [Path("/usr/share/keyrings/debian-archive-keyring.gpg")])
    role_keys(plan["artifacts"], "debian-12/x86_64")   # {"nvidia_repo": [Download(...)], ...}
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from kiln.artifacts.bundle import Download, FetchError


def verify_signature(inrelease: Path, keyrings: list[Path], signature: Path | None = None) -> None:
    """gpgv over an InRelease (or a file and its detached `signature`: repomd.xml and its .asc)
    with these keyrings (armored keys too); FetchError when it does not verify or there is
    nothing to verify it with."""
    missing = [str(k) for k in keyrings if not k.is_file()]
    if missing or not keyrings:
        raise FetchError(
            f"{inrelease.name}: no keyring to check it with ({', '.join(missing) or 'none'}: "
            "install the distribution's keyring package, or let the plan fetch the role's key)"
        )
    with tempfile.TemporaryDirectory(prefix="kiln-gpgv-") as tmp:
        argv = ["gpgv"]
        for number, keyring in enumerate(keyrings):
            if keyring.read_bytes()[:5] == b"-----":  # armored: gpgv reads binary keyrings only
                binary = Path(tmp) / f"key{number}.gpg"
                _run(["gpg", "--batch", "--yes", "--dearmor", "-o", str(binary), str(keyring)], tmp)
                keyring = binary
            argv += ["--keyring", str(keyring)]
        signed = [str(signature), str(inrelease)] if signature else [str(inrelease)]
        result = _run([*argv, *signed], tmp, check=False)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        raise FetchError(
            f"{inrelease}: its signature does not verify ({lines[-1] if lines else ''})"
        )


def _run(argv: list[str], home: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "GNUPGHOME": home}  # a throwaway home: no user's keys are read
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                                env=env)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FetchError(f"{argv[0]} could not run: {exc}") from None
    if check and result.returncode != 0:
        raise FetchError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result


KEY_SUFFIXES = (".pub", ".asc", ".gpg", ".key")


def role_keys(artifacts: list[dict], platform: str) -> dict[str, list[Download]]:
    """The keys each role fetches for this platform (a key, or a file named as a key is):
    what that role's repository is checked with."""
    keys: dict[str, list[Download]] = {}
    for a in artifacts:
        if a["platform"] == platform and (
            a["kind"] == "key" or (a["kind"] == "file" and a["name"].endswith(KEY_SUFFIXES))
        ):
            keys.setdefault(a.get("role", ""), []).append(
                Download(a["source"], "", what=f"key {a['name']}")
            )
    return keys


def verify_rpm(package: Path, keys: list[Path]) -> None:
    """rpm's own check of a package's signature against these keys (what dnf does on the node
    with gpgcheck=1), in a throwaway rpm database; FetchError unless it is signed and verifies.
    Needs rpmkeys (Debian's rpm package) on the fetching machine."""
    if not keys:
        raise FetchError(f"{package.name}: no key to check its signature with")
    with tempfile.TemporaryDirectory(prefix="kiln-rpmdb-") as db:
        for key in keys:
            _run(["rpmkeys", "--dbpath", db, "--import", str(key)], db)
        result = _run(["rpmkeys", "--dbpath", db, "--checksig", str(package)], db, check=False)
    said = (result.stdout or result.stderr).strip()
    if result.returncode != 0 or "signatures OK" not in said:
        raise FetchError(f"{package.name}: not signed by the repository's key ({said})")
