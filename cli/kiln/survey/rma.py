"""A vendor RMA bundle for one node: what a vendor asks before taking a part back (issue 33).

One directory, one file per part, and MANIFEST.json saying which parts were collected and why
not the others:

    identity.json           board and GPU serials, HCA GUIDs (the slurm_node role's reader)
    facts.json              the node's facts from the newest run record that holds them
    burnin-failures.json    its failing verdicts, measured against thresholds, newest burn-in
    health.json             its last health result (kiln-health's last.json)
    xid.log                 NVIDIA Xid lines of the kernel log
    bmc-sensors.txt         `ipmitool sensor`
    bmc-sel.txt             `ipmitool sel elist`

The node is asked once: one shell script, as root, whose sections are framed by marker lines
with a random token (no output can fake one), so a slow BMC costs one SSH session and a script
killed at its deadline still yields the sections it finished. A part that cannot be collected
is recorded, never raised: a bundle of a dead node still carries its run records. Only invalid
input raises, before anything is written.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kiln import __version__
from kiln.errors import EnvironmentProblem, InvalidInputError, KilnError
from kiln.fleet import CommandOutcome, NodeResult, run_as_root, run_command
from kiln.fleet.root import Runner
from kiln.health.results import last_cell, node_command, read_document
from kiln.inventory import Cluster
from kiln.parsers.identity import IDENTITY_KEYS, marker_words
from kiln.records.burnin import load_report
from kiln.records.burnin_verdicts import MAX_REPORTS, PATTERNS
from kiln.records.runs import RunRecord, read_summary, runs_home

MANIFEST = "MANIFEST.json"
SCHEMA = "kiln-rma-bundle/1"
# Installed by the slurm_node role (__slurm_node_identity_reader); kiln.drift.node reads it too.
IDENTITY_READER = "/usr/local/libexec/kiln/node-identity"
XID = "NVRM: Xid"
XID_LINES = 2000  # newest lines kept: a storm of Xids must not push the BMC sections past 1 MiB
SEL_LINES = 3000  # a full SEL is a few thousand entries
KERNEL_DAYS = 30  # every boot in that window: the Xids before a crash are the ones that matter
ERRORS_KEPT = 5  # stderr lines kept per section
NOT_INSTALLED = 127  # the shell's "command not found"
NO_LOG = 2

# Section -> the file it fills; in the order the script runs them (cheap and vital first).
FILES = {
    "identity": "identity.json",
    "health": "health.json",
    "xid": "xid.log",
    "sensors": "bmc-sensors.txt",
    "sel": "bmc-sel.txt",
}
LOCAL = ("facts.json", "burnin-failures.json")

# @M@ the marker, @IDENTITY@ the reader, @HEALTH@ the health command. POSIX sh (dash, bash).
SCRIPT = r"""PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
M='@M@'
d=$(mktemp -d) || exit 3
trap 'rm -rf "$d"' EXIT
sec() {
  name=$1; need=$2; shift 2
  printf '%s begin %s\n' "$M" "$name"
  if [ -n "$need" ] && ! command -v "$need" >/dev/null 2>&1; then
    echo "$need: not installed" >"$d/err"; rc=@NOT_INSTALLED@
  else
    "$@" 2>"$d/err"; rc=$?
  fi
  printf '\n%s end %s %s\n' "$M" "$name" "$rc"
  tail -n @ERRORS@ "$d/err" | sed "s/^/$M stderr $name /"
}
kernel_xid() {
  if command -v journalctl >/dev/null 2>&1 \
    && journalctl -q --no-pager -o short-iso _TRANSPORT=kernel --since=-@DAYS@d >"$d/k" \
    && [ -s "$d/k" ]; then :
  elif dmesg -T >"$d/k" || dmesg >"$d/k"; then :
  else return @NO_LOG@; fi
  grep -F '@XID@' "$d/k" | tail -n @XID_LINES@
  return 0
}
sel_elist() {
  ipmitool sel elist >"$d/s"; r=$?
  tail -n @SEL_LINES@ "$d/s"
  return $r
}
sec identity @IDENTITY@ @IDENTITY@
sec health '' @HEALTH@
sec xid '' kernel_xid
sec sensors ipmitool ipmitool sensor
sec sel ipmitool sel_elist
"""


@dataclass(frozen=True)
class BundlePart:
    name: str  # the file written, e.g. "identity.json"
    ok: bool
    detail: str = ""  # "" or why it was not collected

    def to_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class BundleResult:
    node: str
    directory: Path
    parts: tuple[BundlePart, ...]

    def to_dict(self) -> dict:
        return {
            "node": self.node,
            "directory": str(self.directory),
            "complete": all(part.ok for part in self.parts),
            "parts": [part.to_dict() for part in self.parts],
        }


@dataclass(frozen=True)
class Section:
    """One section of the node's answer: what it printed, its exit code, its last errors."""

    text: str
    rc: int
    errors: str = ""

    def why(self) -> str:
        return self.errors.strip().splitlines()[-1][:200] if self.errors.strip() else ""


def node_script(marker: str) -> str:
    """The one script the node runs, as root, its sections framed by `marker` lines."""
    values = {
        "M": marker, "IDENTITY": IDENTITY_READER, "HEALTH": node_command(last=True),
        "NOT_INSTALLED": NOT_INSTALLED, "NO_LOG": NO_LOG, "ERRORS": ERRORS_KEPT,
        "DAYS": KERNEL_DAYS, "XID": XID, "XID_LINES": XID_LINES, "SEL_LINES": SEL_LINES,
    }  # fmt: skip
    script = SCRIPT
    for key, value in values.items():
        script = script.replace(f"@{key}@", str(value))
    return script


def read_sections(stdout: str, marker: str) -> dict[str, Section]:
    """Each finished section of `stdout`; one the script never finished is absent."""
    tag = re.escape(marker)
    errors: dict[str, list[str]] = {}
    for match in re.finditer(rf"^{tag} stderr (\w+) (.*)$", stdout, re.MULTILINE):
        errors.setdefault(match[1], []).append(match[2])
    framed = re.compile(
        rf"^{tag} begin (\w+)\n(.*?)\n{tag} end \1 (\d+)$", re.MULTILINE | re.DOTALL
    )
    return {
        match[1]: Section(match[2], int(match[3]), "\n".join(errors.get(match[1], [])))
        for match in framed.finditer(stdout)
    }


def _identity(node: str, section: Section) -> tuple[dict | None, str]:
    lines = [line for line in section.text.splitlines() if "board=" in line]
    if section.rc == NOT_INSTALLED:
        return None, f"{IDENTITY_READER} not installed on {node} (the slurm_node role installs it)"
    if section.rc != 0 or not lines:
        why = f"{IDENTITY_READER} failed on {node} (exit {section.rc}) {section.why()}"
        return None, why.rstrip()
    words = marker_words(lines[-1])
    product, _, board = words.get("board", "").partition("/")
    guids = [item.partition(":") for item in words.get("hca_guids", "").split(",") if item]
    return {
        "node": node,
        "line": lines[-1],
        "product_serial": product,
        "board_serial": board,
        "gpu_serials": [s for s in words.get("gpu_serials", "").split(",") if s],
        "hca_guids": {device: guid for device, _, guid in guids},
        "missing": [key for key in IDENTITY_KEYS if key not in words],
    }, ""


def _health(node: str, section: Section) -> tuple[dict | None, str]:
    status = str(CommandOutcome.OK if section.rc == 0 else CommandOutcome.FAILED)
    document = read_document(section.text)
    if document is None:
        return None, f"{node}: {last_cell(status, section.text, section.errors)['text']}"
    return document, ""


def _text(node: str, name: str, section: Section) -> tuple[str | None, str]:
    if name == "xid":
        if section.rc != 0:
            return None, f"kernel log not readable on {node}: {section.why()}".rstrip(": ")
        return "".join(f"{line}\n" for line in section.text.splitlines() if XID in line), ""
    if section.rc == NOT_INSTALLED:
        return None, f"ipmitool not installed on {node}"
    if section.rc != 0:
        return None, f"ipmitool failed on {node} (exit {section.rc}) {section.why()}".rstrip()
    return section.text, ""


def _unanswered(node: str, result: NodeResult | None, timeout: float) -> str:
    """Why a section is missing from the node's answer."""
    if result is None:
        return f"{node} was not asked"
    if result.status is CommandOutcome.TIMEOUT:
        return f"not reached: the script on {node} ran past {timeout:g}s"
    if result.status in (CommandOutcome.UNREACHABLE, CommandOutcome.HOSTKEY):
        return f"{node} {result.status}: {result.error or 'no answer'}"
    said = (result.stderr.strip().splitlines() or [result.error or ""])[-1][:200]
    return f"{node} did not run the script (exit {result.exit_code}): {said}".rstrip(": ")


def newest_facts(cluster: Cluster, node: str, home: Path) -> tuple[dict | None, str]:
    """The node's facts from the newest run record of this inventory that holds facts for it
    (a later preflight limited to other nodes does not hide them)."""
    runs = home / "runs"
    wanted = str(Path(cluster.inventory_dir).resolve())
    for path in sorted(runs.iterdir(), reverse=True) if runs.is_dir() else []:
        record = RunRecord(home, path.name)
        if not (record.summary_path.is_file() and record.facts_path.is_file()):
            continue
        try:
            if read_summary(record.summary_path).get("inventory") != wanted:
                continue
            facts = record.read_facts()
        except KilnError:
            continue  # unreadable: not evidence
        if node in facts:
            return {"node": node, "run_id": record.run_id, "facts": facts[node]}, ""
    return None, f"no run record in {home} holds facts for {node} (the preflight stage saves them)"


def _involves(verdict, node: str) -> bool:
    if verdict.node == node:
        return True
    ends = verdict.name.split(" ")[0].split("<->")  # links: "a<->b" or "a<->b rail1"
    return verdict.node is None and len(ends) == 2 and node in ends


def burnin_failures(cluster: Cluster, node: str, home: Path) -> tuple[dict | None, str]:
    """The node's failing verdicts in the newest burn-in report that judged it, read from the
    run records as `kiln status` finds a node's last burn-in verdict (burnin_verdicts)."""
    found = {path for pattern in PATTERNS for path in home.glob(pattern)}
    for path in sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)[:MAX_REPORTS]:
        try:
            report = load_report(path)
        except KilnError:
            continue  # unreadable or another schema
        if report.cluster != cluster.name or node not in report.node_profiles:
            continue
        failing = [v.to_dict() for v in report.failures if _involves(v, node)]
        profile = report.node_profiles[node]
        floors = report.floors.get(profile)
        return {
            "node": node,
            "run_id": report.run_id,
            "suite": report.suite,
            "verdict": "failed" if failing else "passed",
            "drain_reason": report.drain().get(node),
            "not_tested": report.not_tested.get(node),
            "profile": profile,
            "floors": floors.to_dict() if floors else None,
            "gpu_tflops": report.gpu_tflops.get(node, []),
            "failures": failing,
        }, ""
    return None, f"no burn-in report in {home} judged {node} (cluster {cluster.name})"


def _check(cluster: Cluster, node: str, directory: Path) -> None:
    names = [n.name for n in cluster.nodes]
    if node not in names:
        close = difflib.get_close_matches(node, names, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}?" if close else None
        raise InvalidInputError(f"{node} is not a host of {cluster.name}", hint=hint)
    if directory.exists() and not directory.is_dir():
        raise InvalidInputError(f"--bundle {directory} exists and is not a directory")
    if directory.is_dir() and any(directory.iterdir()):
        raise InvalidInputError(
            f"--bundle {directory} is not empty", hint="give a new or empty directory"
        )


def _write(path: Path, content: str | dict | list) -> None:
    """tmp + rename: a reader (or a vendor's upload) never sees half a file."""
    text = content if isinstance(content, str) else json.dumps(content, indent=2, default=str)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text if text.endswith("\n") or not text else text + "\n")
        os.replace(tmp, path)
    except OSError as error:
        raise EnvironmentProblem(f"cannot write {path}: {error.strerror or error}") from None


def write_bundle(
    cluster: Cluster,
    node: str,
    directory: Path,
    *,
    history: list[dict] | None = None,
    home: Path | None = None,
    runner: Runner = run_command,
    timeout: float = 60.0,
) -> BundleResult:
    """Collect NODE's RMA bundle into `directory` (created; refused when it holds anything):
    the node asked once over SSH as root, the run records under `home` (the runs home)."""
    directory = Path(directory)
    _check(cluster, node, directory)
    home = home or runs_home()
    marker = f"==kiln-rma-{secrets.token_hex(6)}"
    asked = run_as_root([cluster.node(node)], node_script(marker), runner=runner, fanout=1,
                        timeout=timeout)  # fmt: skip
    result = asked.results[0] if asked.results else None
    sections = read_sections(result.stdout, marker) if result else {}
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise EnvironmentProblem(f"cannot create {directory}: {error.strerror}") from None
    parts: list[BundlePart] = []
    collected: list[tuple[str, object | None, str]] = []
    for name, filename in FILES.items():
        section = sections.get(name)
        if section is None:
            collected.append((filename, None, _unanswered(node, result, timeout)))
        elif name == "identity":
            collected.append((filename, *_identity(node, section)))
        elif name == "health":
            collected.append((filename, *_health(node, section)))
        else:
            collected.append((filename, *_text(node, name, section)))
    collected.append((LOCAL[0], *newest_facts(cluster, node, home)))
    collected.append((LOCAL[1], *burnin_failures(cluster, node, home)))
    for filename, content, why in collected:
        if content is not None:
            _write(directory / filename, content)
        parts.append(BundlePart(filename, content is not None, "" if content is not None else why))
    bundle = BundleResult(node, directory, tuple(parts))
    _write(directory / MANIFEST, {
        "kind": SCHEMA,
        "node": node,
        "cluster": cluster.name,
        "inventory": str(Path(cluster.inventory_dir).resolve()),
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kiln": __version__,
        "history": list(history or []),
        "parts": [part.to_dict() for part in parts],
    })  # fmt: skip
    return bundle
