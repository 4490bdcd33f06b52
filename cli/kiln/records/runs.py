"""kiln's runs home (KILN_HOME, else ./.kiln), and the run record of each provision.

State dir: `$KILN_HOME` when set, else `.kiln/` in the current directory (like `.terraform/`:
run kiln from the repository that holds the inventory and the records sit beside it; CI keeps
`.kiln/runs/` as an artifact). Layout:

    <home>/runs/<run-id>/summary.json        the versioned summary (also `kiln provision --json`)
    <home>/runs/<run-id>/events.jsonl        compact event log, one line per event
    <home>/runs/<run-id>/failed_hosts        hosts that failed, one per line
    <home>/runs/<run-id>/unreachable_hosts   hosts that were unreachable, one per line
    <home>/runs/<run-id>/facts.json          facts saved by the preflight stage
    <home>/runs/<run-id>/<stage>/<shard>/    ansible-runner's private data dir of one shard
    <home>/runs/<run-id>/shards/<shard>/     the shard's inventory (its hosts + controllers)
    <home>/runs/<run-id>/files/              cluster-wide files rendered once (slurm.conf)
    <home>/last_run/<inventory-key>          id of the last run on that inventory
    <home>/locks/<inventory-key>.lock        the lock of a provision in progress
    <home>/fact_cache/                       Ansible's jsonfile fact cache

<inventory-key> is the first 16 hex digits of the SHA-256 of the inventory's absolute path.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kiln.errors import EnvironmentProblem, InvalidInputError
from kiln.records.status import GOOD

SUMMARY_SCHEMA_VERSION = 1


def runs_home() -> Path:
    home = os.environ.get("KILN_HOME")
    return (Path(home) if home else Path.cwd() / ".kiln").resolve()


STATE_HINT = (
    "kiln keeps its state under $KILN_HOME (else ./.kiln): make it writable, free space on it, "
    "or point KILN_HOME elsewhere"
)


def unwritable(error: OSError, path: Path | str | None = None) -> EnvironmentProblem:
    """An OSError while writing kiln's state, as the exit-3 error naming the path."""
    where = error.filename or path
    why = error.strerror or str(error)
    return EnvironmentProblem(f"cannot write {where}: {why}", hint=STATE_HINT)


def ensure_writable(home: Path) -> None:
    """Refuse to start with a state directory kiln cannot write (exit 3, naming it): found
    before the lock is taken or any host touched, not halfway through a run."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / f".kiln-write-test-{os.getpid()}"
        probe.write_text("ok\n")
        probe.unlink()
    except OSError as error:
        raise unwritable(error, home) from None


def read_summary(path: Path) -> dict[str, Any]:
    """A run's summary.json; a malformed one is an error naming the file."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise InvalidInputError(
            f"{path} is not a readable run summary ({error})",
            hint="move that run directory aside; kiln writes summaries atomically",
        ) from None
    if not isinstance(summary, dict):
        raise InvalidInputError(f"{path} is not a run summary (a JSON object was expected)")
    return summary


def inventory_key(inventory: Path) -> str:
    return hashlib.sha256(str(Path(inventory).resolve()).encode()).hexdigest()[:16]


def now() -> datetime:
    return datetime.now(UTC)


def new_run_id(when: datetime | None = None) -> str:
    """Sortable and unique: 20260530T101500Z-3f9a1c."""
    when = when or now()
    return f"{when:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.touch(mode=0o600)
        tmp.chmod(0o600)
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as error:
        raise unwritable(error, path) from None


class RunRecord:
    """The directory of one run; the core writes it, commands read it."""

    def __init__(self, home: Path, run_id: str) -> None:
        self.home = home
        self.run_id = run_id
        self.path = home / "runs" / run_id

    @classmethod
    def create(cls, home: Path | None = None, run_id: str | None = None) -> RunRecord:
        record = cls(home or runs_home(), run_id or new_run_id())
        try:
            record.path.mkdir(parents=True, exist_ok=False, mode=0o700)
            record.path.chmod(0o700)  # private whatever the umask: 0700, files 0600
        except OSError as error:
            raise unwritable(error, record.path) from None
        return record

    @property
    def summary_path(self) -> Path:
        return self.path / "summary.json"

    @property
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def facts_path(self) -> Path:
        return self.path / "facts.json"

    def stage_dir(self, stage: str) -> Path:
        path = self.path / stage
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise unwritable(error, path) from None
        return path

    def write_summary(self, summary: dict[str, Any]) -> None:
        _write_atomic(self.summary_path, json.dumps(summary, indent=2, default=str) + "\n")
        for name, hosts in (
            ("failed_hosts", summary.get("failed_hosts", [])),
            ("unreachable_hosts", summary.get("unreachable_hosts", [])),
        ):
            _write_atomic(self.path / name, "".join(f"{host}\n" for host in hosts))

    def write_facts(self, facts: dict[str, Any]) -> None:
        _write_atomic(self.facts_path, json.dumps(facts, indent=2, sort_keys=True) + "\n")

    def read_facts(self) -> dict[str, Any]:
        if not self.facts_path.is_file():
            return {}
        try:
            facts = json.loads(self.facts_path.read_text())
        except (OSError, ValueError) as error:
            raise InvalidInputError(f"{self.facts_path} is not readable facts ({error})") from None
        if not isinstance(facts, dict):
            raise InvalidInputError(f"{self.facts_path} is not facts (a JSON object expected)")
        return facts

    def hosts_file(self, name: str) -> list[str]:
        path = self.path / name
        if not path.is_file():
            return []
        return [line.strip() for line in path.read_text().splitlines() if line.strip()]

    def mark_last(self, inventory: Path) -> None:
        pointer = self.home / "last_run" / inventory_key(inventory)
        try:
            pointer.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise unwritable(error, pointer.parent) from None
        _write_atomic(pointer, self.run_id + "\n")


def last_run(inventory: Path, home: Path | None = None) -> RunRecord | None:
    """The last provision run on this inventory, or None."""
    home = home or runs_home()
    pointer = home / "last_run" / inventory_key(inventory)
    if not pointer.is_file():
        return None
    record = RunRecord(home, pointer.read_text().strip())
    return record if record.summary_path.is_file() else None


def last_run_with(inventory: Path, stage: str, home: Path | None = None) -> RunRecord | None:
    """The newest run on this inventory whose summary includes `stage` (for `kiln facts`)."""
    home = home or runs_home()
    runs = home / "runs"
    if not runs.is_dir():
        return None
    wanted = str(Path(inventory).resolve())
    for path in sorted(runs.iterdir(), reverse=True):
        summary_path = path / "summary.json"
        if not summary_path.is_file():
            continue  # a run in progress, or killed before its summary
        summary = read_summary(summary_path)
        stages = [entry.get("name") for entry in summary.get("stages", [])]
        if summary.get("inventory") == wanted and stage in stages:
            return RunRecord(home, path.name)
    return None


def retry_hosts(inventory: Path, home: Path | None = None) -> list[str]:
    """Hosts that failed or were unreachable in the last run on this inventory."""
    record = last_run(inventory, home)
    if record is None:
        raise InvalidInputError(
            f"no previous run on {inventory} to retry",
            hint="run `kiln provision` without --retry-failed first",
        )
    hosts = record.hosts_file("failed_hosts") + record.hosts_file("unreachable_hosts")
    return list(dict.fromkeys(hosts))


def provisioned_hosts(inventory: Path, home: Path | None = None) -> set[str]:
    """Hosts some earlier (non-check) run on this inventory took through every stage it ran,
    each ending ok or changed: what `kiln provision --new-nodes` leaves to a refresh.

    Reads each run's summary once (linear in runs x hosts).
    """
    home = home or runs_home()
    runs = home / "runs"
    wanted = str(Path(inventory).resolve())
    done: set[str] = set()
    if not runs.is_dir():
        return done
    for path in sorted(runs.iterdir()):
        if not (path / "summary.json").is_file():
            continue  # a run in progress, or killed before its summary
        summary = read_summary(path / "summary.json")
        if summary.get("inventory") != wanted or summary.get("check"):
            continue
        ran = [
            e["name"]
            for e in summary.get("stages", [])
            if e.get("status") != "skipped" and e["name"] != "refresh"
        ]
        for host, statuses in (summary.get("hosts") or {}).items():
            if ran and all(statuses.get(name) in GOOD for name in ran):
                done.add(host)
    return done
