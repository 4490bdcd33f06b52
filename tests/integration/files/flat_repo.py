"""A flat apt repository made whole inside a sandbox container: its package index, its Release
file and a signing key of its own, made for it. Imported by the repository build scripts beside
it (tests/integration/site_repo.py copies it next to them)."""

import os
import subprocess


def run(*argv, **kwargs):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs).stdout


def index_and_sign(repo, work):
    """Index the debs in `repo`, sign its Release with a new ed25519 key (key.asc beside it),
    and return the key's fingerprint (the primary key's)."""
    with open(os.path.join(repo, "Packages"), "w") as handle:
        handle.write(run("apt-ftparchive", "packages", ".", cwd=repo))
    release = run("apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=kiln-site",
                  "release", ".", cwd=repo)  # fmt: skip
    with open(os.path.join(repo, "Release"), "w") as handle:
        handle.write(release)
    os.makedirs(os.path.join(work, "gnupg"), mode=0o700, exist_ok=True)
    gpg = ["gpg", "--batch", "--homedir", os.path.join(work, "gnupg")]
    run(*gpg, "--passphrase", "", "--quick-gen-key", "kiln site repository", "ed25519", "sign")
    with open(os.path.join(repo, "key.asc"), "w") as handle:
        handle.write(run(*gpg, "--armor", "--export"))
    run(*gpg, "--yes", "--clearsign", "-o", os.path.join(repo, "InRelease"),
        os.path.join(repo, "Release"))  # fmt: skip
    colons = run(*gpg, "--with-colons", "--list-keys")
    return [line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:")][0]
