"""Build a site's Slurm repository inside a sandbox container: Debian's own Slurm packages, rebuilt
with a site suffix on their version, in a signed flat apt repository served over HTTP.

A site that rebuilds Debian's packaging (a local patch, a newer point release) serves packages
named as Debian's at a version of its own; `kiln_slurm.source: repository` with
`packages: debian` installs exactly those. The rebuild here changes only the version (and the
exact-version dependencies between the packages of the same source), so the binaries are
Debian's and the version says where they came from.

    python3 site_slurm_repo.py SUFFIX   # prints the rebuilt version and the key's fingerprint
"""

import os
import re
import sys

from flat_repo import index_and_sign, run

REPO = "/srv/repo"
WORK = "/srv/work"
ROOTS = ["slurm-client", "slurmd", "slurmctld"]


def show(package):
    """The candidate's control fields (apt-cache show prints the candidate first)."""
    text = run("apt-cache", "show", "--no-all-versions", package)
    fields, key = {}, None
    for line in text.splitlines():
        if line.startswith(" ") and key:
            fields[key] += "\n" + line
        elif ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value.strip()
    return fields


def closure(version):
    """The roots and every package they depend on at exactly `version` (one source's set)."""
    found, todo = set(), list(ROOTS)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        depends = show(name).get("Depends", "") + "," + show(name).get("Pre-Depends", "")
        todo += re.findall(r"([a-z0-9.+-]+) \(= " + re.escape(version) + r"\)", depends)
    return sorted(found)


def rebuild(deb, version, new):
    tree = os.path.join(WORK, "tree")
    run("rm", "-rf", tree)
    run("dpkg-deb", "-R", deb, tree)
    control = os.path.join(tree, "DEBIAN", "control")
    with open(control) as handle:
        text = handle.read()
    text = text.replace(f"Version: {version}\n", f"Version: {new}\n")
    text = text.replace(f"(= {version})", f"(= {new})")
    with open(control, "w") as handle:
        handle.write(text)
    run("dpkg-deb", "--root-owner-group", "-Zxz", "-b", tree, REPO)


def main(suffix):
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run("apt-get", "update", "-qq", env=env)
    run("apt-get", "install", "-y", "-qq", "gnupg", "apt-utils", "dpkg-dev", env=env)
    version = show("slurmd")["Version"]
    new = version + suffix
    os.makedirs(REPO, exist_ok=True)
    os.makedirs(WORK, exist_ok=True)
    packages = closure(version)
    run("apt-get", "download", *(f"{name}={version}" for name in packages), cwd=WORK)
    for deb in sorted(f for f in os.listdir(WORK) if f.endswith(".deb")):
        rebuild(os.path.join(WORK, deb), version, new)
    fingerprint = index_and_sign(REPO, WORK)
    print(new, fingerprint)


if __name__ == "__main__":
    main(sys.argv[1])
