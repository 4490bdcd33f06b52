"""Build a site's repository of a newer Slurm inside a sandbox container: Debian's own binary
packages of a later Slurm release from a later Debian suite (forky's slurm-wlm 26.05.5 for the
Debian 13 sandbox's 24.11.5), with the few libraries of that suite they need and the node's
release lacks, in a signed flat apt repository served over HTTP. A site that runs a newer Slurm
than its OS ships does the same with its own rebuild; `kiln_slurm.source: repository` with
`packages: debian` installs it.

What goes in is what apt, asked to install the Slurm packages from the later suite on this
node's release, takes from that suite: nothing of the node's release is replaced by it.

    python3 newer_slurm_repo.py SUITE VERSION   # prints the key's fingerprint
"""

import os
import re
import subprocess
import sys

from flat_repo import index_and_sign, run

REPO = "/srv/repo"
WORK = "/srv/work"
ROOTS = ["slurm-client", "slurmd", "slurmctld", "slurmdbd"]


def in_release(name, suite):
    """Whether the node's own release carries package `name` (at any version)."""
    madison = run("apt-cache", "madison", name)
    return any(suite not in line for line in madison.splitlines() if "Packages" in line)


def main(suite, version):
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with open(f"/etc/apt/sources.list.d/{suite}.list", "w") as handle:
        # A testing suite's Release file is re-signed weekly; the archive here may be older.
        handle.write(f"deb [check-valid-until=no] http://deb.debian.org/debian {suite} main\n")
    with open(f"/etc/apt/preferences.d/{suite}", "w") as handle:
        handle.write(f"Package: *\nPin: release n={suite}\nPin-Priority: 100\n")
    run("apt-get", "update", "-qq", env=env)
    run("apt-get", "install", "-y", "-qq", "gnupg", "apt-utils", "dpkg-dev", env=env)
    wanted = [f"{name}={version}" for name in ROOTS]
    # A package the later Slurm needs at a version only the later suite has (its own plugins, a
    # newer library): apt is told to take the later suite's for each one it names as unmet.
    extra = []
    while True:
        simulated = subprocess.run(
            ["apt-get", "install", "-s", *wanted, *extra], capture_output=True, text=True, env=env
        )
        unmet = re.findall(r"Depends: (\S+) \(>?= [^)]*\) but \S+ is to be installed",
                           simulated.stdout)  # fmt: skip
        if simulated.returncode == 0:
            break
        if not unmet:
            raise SystemExit(simulated.stdout + simulated.stderr)
        extra += [f"{name}/{suite}" for name in unmet if f"{name}/{suite}" not in extra]
    taken = re.findall(r"^Inst (\S+) (?:\[[^]]*\] )?\((\S+) [^)]*Debian:testing", simulated.stdout,
                       re.MULTILINE)  # fmt: skip
    # What the node's release has at any version stays the node's unless named above.
    named = set(ROOTS) | {item.split("/")[0] for item in extra}
    later = [(name, ver) for name, ver in taken if name in named or not in_release(name, suite)]
    os.makedirs(REPO, exist_ok=True)
    run("apt-get", "download", *(f"{name}={ver}" for name, ver in later), cwd=REPO)
    fingerprint = index_and_sign(REPO, WORK)
    print(" ".join(name for name, _ in later))
    print(fingerprint)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
