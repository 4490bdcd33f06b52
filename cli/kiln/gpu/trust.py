"""A repository signing key is trusted only when its fingerprint is the pinned one.

Reads `gpg --show-keys --with-colons KEYFILE` (GnuPG's machine-readable listing: a `pub` record
for each primary key followed by its `fpr` record) so a key swapped on the mirror, or a file
holding extra keys, is refused before apt ever sees it.
"""

from __future__ import annotations


def primary_fingerprints(colons: str) -> list[str]:
    """The primary keys' fingerprints in a `--with-colons` listing (subkeys' are skipped)."""
    found = []
    after_pub = False
    for line in colons.splitlines():
        record = line.split(":")
        if record[0] == "pub":
            after_pub = True
        elif record[0] == "fpr" and after_pub and len(record) > 9:
            found.append(record[9].upper())
            after_pub = False
        elif record[0] == "sub":
            after_pub = False
    return found


def key_problem(colons: str, pinned: str, source: str) -> str | None:
    """None when `source` holds exactly the pinned key; else why it is refused."""
    wanted = pinned.replace(" ", "").upper()
    found = primary_fingerprints(colons)
    if not found:
        return f"{source} holds no OpenPGP public key"
    if found != [wanted]:
        return (
            f"{source} holds key {', '.join(found)}, not the pinned {wanted}: "
            "refusing the repository (check the mirror, or pin the new key deliberately)"
        )
    return None
