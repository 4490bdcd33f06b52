"""The program kiln runs on a node, in one SSH exec: record what a stage applied, or probe it.

Standard library only, Python 3.8+: kiln ships this file's source to the node (`python3 -c`),
nothing is installed there.

    record PAYLOAD   PAYLOAD: base64 JSON {"records": {stage: {fingerprint, run_id, files,
                     packages, services, versions}}, "remove": [stage, ...]}; for each record,
                     the files' sha256, the packages' versions and the services' states are read
                     now (right after the stage succeeded) and kept in APPLIED/<stage>.json with
                     the declared versions ({"slurmd": "22.05"}: what `slurmd -V` must say)
    probe            for every APPLIED/<stage>.json: its fingerprint, and what differs now
                     (a file's sha256, a package's version, a service active/enabled, a daemon's
                     `-V` against its declared version); plus the restart markers a failed run
                     left (*-pending under /var/lib/kiln), and the node's hardware identity:
                     what the slurm_node role last saw (JOINED) and what its identity reader
                     (IDENTITY_READER, installed by that role) prints now; kiln compares them
                     (kiln.parsers.identity)

Packages are read from the node's package database: dpkg (dpkg-query) or RPM (rpm -q).

`--root DIR` prefixes every path (the tests' stand-in for /). Prints one JSON document.
"""

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

SCHEMA = "kiln-drift/1"
APPLIED = "/var/lib/kiln/applied"
MARKERS = "/var/lib/kiln"
DPKG_DATABASE = "/var/lib/dpkg/status"
RPM_DATABASES = ("/var/lib/rpm", "/usr/lib/sysimage/rpm")
# The programs whose version a record can declare, and how each says it: `slurmd -V` prints a
# package name and the version, "slurm-wlm 24.11.5" on Debian 13 (tests/fixtures/real/
# slurm-version), "slurm X.Y.Z" elsewhere. Root's sbin directories are searched too: a non-login
# SSH session's PATH may lack them.
VERSION_COMMANDS = {"slurmd": ["slurmd", "-V"], "slurmctld": ["slurmctld", "-V"]}
SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")
JOINED = "/var/lib/kiln/slurm-joined"
IDENTITY_READER = "/usr/local/libexec/kiln/node-identity"
IDENTITY_TIMEOUT = 150
VERSION_TIMEOUT = 30
_VERSION = re.compile(r"^\s*slurm(?:-wlm)?\s+(\d+\.\d+(?:\.\d+)?\S*)", re.MULTILINE)


def _path(root, path):
    return os.path.join(root, path.lstrip("/")) if root else path


def file_state(root, paths):
    """path -> sha256 of its content, or None when it is missing (or not a regular file)."""
    state = {}
    for path in paths:
        digest = hashlib.sha256()
        try:
            with open(_path(root, path), "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):  # noqa: B023
                    digest.update(block)
            state[path] = digest.hexdigest()
        except OSError:
            state[path] = None
    return state


def _run(argv, timeout=None, stderr=False):
    """The command's stdout (and its stderr after it, with `stderr`); None when it could not
    run or ran past `timeout`."""
    try:
        proc = subprocess.run(argv, capture_output=True, check=False, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout + (proc.stderr if stderr else b"")).decode("utf-8", "replace")


def package_manager(root):
    """Which package database the node holds, "dpkg" (looked for first) or "rpm"; else the
    first of dpkg-query and rpm on PATH; None when it has neither."""
    if os.path.exists(_path(root, DPKG_DATABASE)):
        return "dpkg"
    if any(os.path.isdir(_path(root, path)) for path in RPM_DATABASES):
        return "rpm"
    if shutil.which("dpkg-query"):
        return "dpkg"
    return "rpm" if shutil.which("rpm") else None


def package_state(names, root=""):
    """name -> installed version, or None when it is not installed; one dpkg-query (or one
    rpm -q) for all."""
    state = {name: None for name in names}
    if not names:
        return state
    manager = package_manager(root)
    if manager == "rpm":
        # rpm -q prints "package NAME is not installed" for one it lacks (no tab) and exits 1;
        # an installed one gets dpkg's "ii" in the third column, so one parser reads both
        text = _run(["rpm", "-q", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\tii\n"]
                    + sorted(names))  # fmt: skip
    else:
        text = _run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"]
                    + sorted(names))  # fmt: skip
    if text is None:
        raise RuntimeError(f"{'rpm' if manager == 'rpm' else 'dpkg-query'} is not available")
    for line in text.splitlines():
        parts = line.split("\t")
        # the first line of a name wins (rpm: several arches of one package, multilib)
        if len(parts) >= 3 and parts[2][1:2] == "i" and state.get(parts[0], "") is None:
            state[parts[0]] = parts[1]
    return state


def parse_version(text):
    """The version `slurmd -V` (or slurmctld) printed: "22.05.8" from "slurm 22.05.8"; None
    when the text holds none."""
    found = _VERSION.search(text or "")
    return found.group(1) if found else None


def version_state(names, root=""):
    """name -> the version its program prints now (VERSION_COMMANDS), or None when the program
    is missing or prints no version; one short exec each."""
    state = {}
    search = os.pathsep.join([os.environ.get("PATH", ""), *(_path(root, d) for d in SBIN)])
    for name in names:
        argv = VERSION_COMMANDS.get(name)
        program = shutil.which(argv[0], path=search) if argv else None
        text = _run([program, *argv[1:]], VERSION_TIMEOUT, stderr=True) if program else None
        state[name] = parse_version(text)
    return state


def _numbers(version):
    return [int(part) for part in re.findall(r"\d+", version)[:3]]


def version_matches(declared, seen):
    """A declared release (22.05) takes any version of it; an exact one (22.05.8) only itself
    (kiln.profiles.slurm's rule). Nothing seen matches nothing."""
    if seen is None:
        return False
    wanted = _numbers(str(declared))
    return _numbers(seen)[: len(wanted)] == wanted


def service_state(names):
    """name -> {"active", "enabled"} as systemd says now; one systemctl for all."""
    if not names:
        return {}
    ordered = sorted(names)
    text = _run(["systemctl", "show", "--no-pager", "-p", "ActiveState,UnitFileState", "--"]
                + ordered)  # fmt: skip
    if text is None:
        raise RuntimeError("systemctl is not available")
    blocks = [block for block in text.strip("\n").split("\n\n")]
    state = {}
    for index, name in enumerate(ordered):
        fields = {}
        if index < len(blocks):
            for line in blocks[index].splitlines():
                key, _, value = line.partition("=")
                fields[key] = value
        state[name] = {
            "active": fields.get("ActiveState", "unknown"),
            "enabled": fields.get("UnitFileState") or "unknown",
        }
    return state


def record(root, payload):
    directory = _path(root, APPLIED)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    written, removed = [], []
    for stage, entry in sorted(payload.get("records", {}).items()):
        document = {
            "schema": SCHEMA,
            "stage": stage,
            "fingerprint": entry["fingerprint"],
            "run_id": entry.get("run_id"),
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": file_state(root, entry.get("files", [])),
            "packages": package_state(entry.get("packages", []), root),
            "services": service_state(entry.get("services", [])),
            "versions": dict(entry.get("versions") or {}),
        }
        target = os.path.join(directory, stage + ".json")
        temporary = target + ".tmp"
        with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            json.dump(document, out, sort_keys=True)
        os.replace(temporary, target)
        written.append(stage)
    for stage in payload.get("remove", []):
        try:
            os.unlink(os.path.join(directory, stage + ".json"))
            removed.append(stage)
        except FileNotFoundError:
            pass
    return {"schema": SCHEMA, "written": written, "removed": removed}


def _differences(recorded, now, kind):
    found = []
    for name in sorted(recorded):
        if recorded[name] != now.get(name):
            found.append({"kind": kind, "name": name, "recorded": recorded[name],
                          "now": now.get(name)})  # fmt: skip
    return found


def identity(root):
    """(what the slurm_node role last saw of the node, what its reader prints now): either
    None where it is not there (a node the role never quarantined, an older kiln's)."""
    try:
        with open(_path(root, JOINED)) as handle:
            seen = handle.read().strip()
    except OSError:
        seen = None
    reader = _path(root, IDENTITY_READER)
    if not os.access(reader, os.X_OK):
        return seen, None
    argv = [reader] + (["--root", root] if root else [])
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=IDENTITY_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return seen, None
    return seen, (proc.stdout.strip() if proc.returncode == 0 else None)


def probe(root):
    """Every record's fingerprint and drift: one dpkg-query (or rpm -q) and one systemctl for
    all stages, and each declared program's `-V` once."""
    directory = _path(root, APPLIED)
    documents, stages, errors = {}, {}, []
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except FileNotFoundError:
        names = []
    for name in names:
        try:
            with open(os.path.join(directory, name)) as handle:
                document = json.load(handle)
            for key in ("files", "packages", "services", "versions"):
                if not isinstance(document.get(key, {}), dict):
                    raise ValueError(f"{key} is not a mapping")
            documents[name[: -len(".json")]] = document
        except (OSError, ValueError) as error:
            errors.append(f"{name}: {error}")
    wanted = {"files": set(), "packages": set(), "services": set(), "versions": set()}
    for document in documents.values():
        for key, names_of in wanted.items():
            names_of.update(document.get(key, {}))
    try:
        now = {
            "files": file_state(root, sorted(wanted["files"])),
            "packages": package_state(sorted(wanted["packages"]), root),
            "services": service_state(sorted(wanted["services"])),
            "versions": version_state(sorted(wanted["versions"]), root),
        }
    except RuntimeError as error:
        return {"schema": SCHEMA, "stages": {}, "pending": [], "errors": [str(error)]}
    for stage, document in documents.items():
        drift = []
        for key, kind in (("files", "file"), ("packages", "package"), ("services", "service")):
            drift += _differences(document.get(key, {}), now[key], kind)
        for name, declared in sorted(document.get("versions", {}).items()):
            if not version_matches(declared, now["versions"].get(name)):
                drift.append({"kind": "version", "name": name, "recorded": declared,
                              "now": now["versions"].get(name)})  # fmt: skip
        stages[stage] = {
            "fingerprint": document.get("fingerprint"),
            "run_id": document.get("run_id"),
            "recorded": document.get("recorded"),
            "drift": drift,
        }
    try:
        markers = sorted(n for n in os.listdir(_path(root, MARKERS)) if n.endswith("-pending"))
    except OSError:
        markers = []
    seen, now_identity = identity(root)
    return {"schema": SCHEMA, "stages": stages, "pending": markers, "errors": errors,
            "joined": seen, "identity": now_identity}  # fmt: skip


def main(argv):
    root = ""
    if "--root" in argv:
        at = argv.index("--root")
        root = argv[at + 1]
        argv = argv[:at] + argv[at + 2 :]
    if argv[:1] == ["probe"]:
        answer = probe(root)
    elif argv[:1] == ["record"] and len(argv) == 2:
        answer = record(root, json.loads(base64.b64decode(argv[1])))
    else:
        sys.stderr.write("usage: node.py [--root DIR] probe | record PAYLOAD\n")
        return 2
    sys.stdout.write(json.dumps(answer, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
