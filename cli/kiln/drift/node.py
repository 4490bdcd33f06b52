"""The program kiln runs on a node, in one SSH exec: record what a stage applied, or probe it.

Standard library only, Python 3.8+: kiln ships this file's source to the node (`python3 -c`),
nothing is installed there.

    record PAYLOAD   PAYLOAD: base64 JSON {"records": {stage: {fingerprint, run_id, files,
                     packages, services}}, "remove": [stage, ...]}; for each record, the files'
                     sha256, the packages' versions and the services' states are read now (right
                     after the stage succeeded) and kept in APPLIED/<stage>.json
    probe            for every APPLIED/<stage>.json: its fingerprint, and what differs now
                     (a file's sha256, a package's version, a service active/enabled); plus the
                     restart markers a failed run left (*-pending under /var/lib/kiln)

`--root DIR` prefixes every path (the tests' stand-in for /). Prints one JSON document.
"""

import base64
import hashlib
import json
import os
import subprocess
import sys
import time

SCHEMA = "kiln-drift/1"
APPLIED = "/var/lib/kiln/applied"
MARKERS = "/var/lib/kiln"


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


def _run(argv):
    try:
        proc = subprocess.run(argv, capture_output=True, check=False)
    except OSError:
        return None
    return proc.stdout.decode("utf-8", "replace")


def package_state(names):
    """name -> installed version, or None when it is not installed; one dpkg-query for all."""
    state = {name: None for name in names}
    if not names:
        return state
    text = _run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"]
                + sorted(names))  # fmt: skip
    if text is None:
        raise RuntimeError("dpkg-query is not available")
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0] in state and parts[2][1:2] == "i":
            state[parts[0]] = parts[1]
    return state


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
            "packages": package_state(entry.get("packages", [])),
            "services": service_state(entry.get("services", [])),
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


def probe(root):
    """Every record's fingerprint and drift: one dpkg-query and one systemctl for all stages."""
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
            for key in ("files", "packages", "services"):
                if not isinstance(document.get(key, {}), dict):
                    raise ValueError(f"{key} is not a mapping")
            documents[name[: -len(".json")]] = document
        except (OSError, ValueError) as error:
            errors.append(f"{name}: {error}")
    wanted = {"files": set(), "packages": set(), "services": set()}
    for document in documents.values():
        for key, names_of in wanted.items():
            names_of.update(document.get(key, {}))
    try:
        now = {
            "files": file_state(root, sorted(wanted["files"])),
            "packages": package_state(sorted(wanted["packages"])),
            "services": service_state(sorted(wanted["services"])),
        }
    except RuntimeError as error:
        return {"schema": SCHEMA, "stages": {}, "pending": [], "errors": [str(error)]}
    for stage, document in documents.items():
        drift = []
        for key, kind in (("files", "file"), ("packages", "package"), ("services", "service")):
            drift += _differences(document.get(key, {}), now[key], kind)
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
    return {"schema": SCHEMA, "stages": stages, "pending": markers, "errors": errors}


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
