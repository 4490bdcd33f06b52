"""`kiln health`'s reading of what the nodes answered: one result document per node.

command = node_command(json_=True)   # what runs on each node over SSH (as root: fleet.as_root)
document = read_document(stdout)     # kiln.health.node's JSON, or None
"""

from __future__ import annotations

import json
import shlex

PROGRAM = "/usr/local/sbin/kiln-health"
LAST = "/var/lib/kiln/health/last.json"


def node_command(*, last: bool = False, json_: bool = False) -> str:
    """The shell command for one node, to run as root there (kiln.fleet.run_as_root): the check
    in report mode (nothing changed in Slurm), or the last result Slurm's own run left."""
    if last:
        return f"cat {shlex.quote(LAST)}"
    return f"{shlex.quote(PROGRAM)} --report" + (" --json" if json_ else "")


def read_document(stdout: str) -> dict | None:
    """The node's result document (the last JSON line it printed); None when there is none."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            document = json.loads(line if line.startswith("{") else "")
        except ValueError:
            continue
        if isinstance(document, dict) and document.get("kind") == "kiln-health":
            return document
    try:  # last.json is indented over several lines
        document = json.loads(stdout)
    except ValueError:
        return None
    return (
        document if isinstance(document, dict) and document.get("kind") == "kiln-health" else None
    )


def node_entry(host: str, status: str, exit_code: int | None, stdout: str) -> dict:
    """One node of `kiln health --json`: its document, or why there is none."""
    document = read_document(stdout)
    return {
        "host": host,
        "status": status,
        "exit_code": exit_code,
        # The document's verdict; without one (text output) the program's exit code: 0 healthy.
        "ok": bool(document.get("ok")) if document else (status == "ok" and exit_code == 0),
        "result": document,
        "failing": [f for f in (document or {}).get("findings", []) if f.get("ok") is False],
        # probes that could not check (ok null): said, never counted as failing
        "unchecked": [f for f in (document or {}).get("findings", []) if f.get("ok") is None],
    }


def last_cell(status: str, stdout: str, stderr: str = "") -> dict:
    """One node's last periodic result for `kiln status --health`, from what
    node_command(last=True) answered: {"ok": True/False/None, "time": ..., "text": one line}.
    ok None: nothing to judge (no periodic run yet, or the node did not answer)."""
    document = read_document(stdout) if status in ("ok", "failed") else None
    if document is None:
        if status not in ("ok", "failed"):
            return {"ok": None, "time": None, "text": f"not read ({status})"}
        if "No such file" in stderr or (status == "ok" and not stdout.strip()):
            return {"ok": None, "time": None, "text": "no result yet"}
        said = (stderr.strip().splitlines() or ["no result document"])[-1][:120]
        return {"ok": None, "time": None, "text": f"not read: {said}"}
    when = str(document.get("time", "?"))
    findings = document.get("findings", [])
    if document.get("ok"):
        unchecked = [str(f.get("check")) for f in findings if f.get("ok") is None]
        but = f" (could not check {', '.join(unchecked)})" if unchecked else ""
        return {"ok": True, "time": when, "text": f"healthy{but} at {when}"}
    failing = [f for f in findings if f.get("ok") is False]
    first = failing[0] if failing else {"check": "?", "reading": "unhealthy"}
    more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
    text = f"FAIL {first.get('check')}: {first.get('reading')}{more} at {when}"
    return {"ok": False, "time": when, "text": text}
