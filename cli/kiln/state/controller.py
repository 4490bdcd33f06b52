"""The provision lock and the cluster's state, kept in a directory on the Slurm controller.

    /var/lib/kiln/state/lock          flock(1) target; held by a shell whose stdin is kiln's channel
    /var/lib/kiln/state/holder.json   who holds it (user, host, pid, start time, lock id, run id)
    /var/lib/kiln/state/state.json    the cluster's state (kiln.state.cluster)
    /var/lib/kiln/state/state.lock    serialises updates of state.json

The lock: kiln opens one session running a shell that takes `flock -w 1` on the lock file,
writes the holder, answers `KILN-LOCK-TAKEN` and then reads its stdin until end-of-file. The
lock lives exactly as long as that shell: kiln exits, dies or loses its connection -> sshd closes
the channel -> the shell reads EOF and exits -> the kernel drops the lock. kiln writes a
heartbeat line every HEARTBEAT_S; a shell that hears nothing for TTL_S (a connection lost
without a FIN, which sshd may not notice for hours) exits too. So no lock outlives its holder,
and nothing ever needs to take a lock over from a dead holder.

The holder notices a lost lock: the shell answers every line with `KILN-LOCK-OK` while `lock`
is still the file it holds (`KILN-LOCK-LOST` and exit when someone removed or replaced it), and
the session ends when the shell does (killed, timed out). `check()` asks once and raises
LockLost; kiln asks before each stage and shard (docs/operations.md, "The cluster lock").

The commands run as the login user when the directory is writable to it, else under `sudo -n`.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from dataclasses import asdict

from kiln.errors import EnvironmentProblem
from kiln.records.lock import LockInfo, LockLost
from kiln.state.remote import Remote, RemoteUnavailable, Session, run

DEFAULT_DIR = "/var/lib/kiln/state"
TTL_S = 300
HEARTBEAT_S = 20
ANSWER_S = 30.0  # login, sudo and flock -w 1, on a busy controller

TAKEN, HELD, FREE, UNWRITABLE = (
    "KILN-LOCK-TAKEN",
    "KILN-LOCK-HELD",
    "KILN-LOCK-FREE",
    "KILN-STATE-UNWRITABLE",
)
STILL, GONE = "KILN-LOCK-OK", "KILN-LOCK-LOST"

OPEN_DIRECTORY = (
    'umask 077; mkdir -p "$D" 2>/dev/null && [ -w "$D" ] '
    f'|| {{ echo "{UNWRITABLE} cannot write $D as $(id -un)"; exit 4; }}\n'
    f'command -v flock >/dev/null || {{ echo "{UNWRITABLE} flock(1) is missing"; exit 4; }}\n'
)
LOCK_SCRIPT = (
    OPEN_DIRECTORY
    + f'exec 9>>"$D/lock" || {{ echo "{UNWRITABLE} cannot open $D/lock"; exit 4; }}\n'
    f'if ! flock -w 1 9; then echo {HELD}; cat "$D/holder.json" 2>/dev/null; exit 3; fi\n'
    # what a killed holder left (the kernel freed its lock): reported as cleared_stale
    "P=$(head -c 4096 \"$D/holder.json\" 2>/dev/null | tr -d '\\n')\n"
    'printf "%s\\n" "$H" >"$D/holder.json.tmp" && mv -f "$D/holder.json.tmp" "$D/holder.json" '
    f'|| {{ echo "{UNWRITABLE} cannot write $D/holder.json"; exit 4; }}\n'
    f'echo "{TAKEN} $P"\n'
    'while IFS= read -r -t "$T" _; do\n'
    f'  [ /dev/fd/9 -ef "$D/lock" ] || {{ echo "{GONE} $D/lock was removed or replaced"; '
    "exit 5; }\n"
    f"  echo {STILL}\n"
    "done\n"
    '[ /dev/fd/9 -ef "$D/lock" ] && : >"$D/holder.json"\n'
)
PROBE_SCRIPT = (
    f'[ -e "$D/lock" ] || {{ echo {FREE}; exit 0; }}\n'
    f'exec 9<"$D/lock" || {{ echo "{UNWRITABLE} cannot read $D/lock"; exit 4; }}\n'
    f'if flock -n 9; then echo {FREE}; else echo {HELD}; fi; cat "$D/holder.json" 2>/dev/null\n'
)
# Merge a JSON patch (stdin) into state.json: top-level keys replaced, `nodes` merged per node and
# field; a node's first `joined` time is kept; with `members` (every host of the inventory), a
# node the inventory no longer lists is forgotten, so it joins again as new when it comes back.
# Written to a temporary file and renamed.
MERGE = r"""
import json, os, sys
path = sys.argv[1]
try:
    with open(path) as f:
        state = json.load(f)
except (OSError, ValueError):
    state = {}
patch = json.load(sys.stdin)
members = patch.pop("members", None)
for key, value in patch.items():
    if key != "nodes":
        state[key] = value
        continue
    nodes = state.setdefault("nodes", {})
    for name, fields in value.items():
        node = nodes.setdefault(name, {})
        if node.get("joined"):
            fields.pop("joined", None)
        node.update(fields)
if members is not None:
    members = set(members)
    nodes = state.get("nodes", {})
    for name in [name for name in nodes if name not in members]:
        del nodes[name]
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(state, f, indent=1, sort_keys=True)
    f.flush()
    os.fsync(f.fileno())
os.replace(tmp, path)
print("KILN-STATE-SAVED")
"""
UPDATE_SCRIPT = (
    OPEN_DIRECTORY
    + f'exec 8>>"$D/state.lock" && flock -w 30 8 || {{ echo "{UNWRITABLE} state.lock"; exit 4; }}\n'
    'python3 -c "$M" "$D/state.json"\n'
)
READ_SCRIPT = '[ -r "$D/state.json" ] && cat "$D/state.json"; exit 0\n'
# Whether the state directory exists, asked as the login user (never through sudo): the nearest
# existing path above it must be a directory the user can search, else the answer is "present"
# (an unsearchable /var/lib/kiln may hold it: in doubt, the cluster has state there).
ABSENT, PRESENT = "KILN-STATE-ABSENT", "KILN-STATE-PRESENT"
PRESENCE_SCRIPT = (
    'p="$D"\n'
    'while [ ! -e "$p" ] && [ "$p" != / ] && [ -n "$p" ]; do p=$(dirname "$p"); done\n'
    f'if [ "$p" != "$D" ] && [ -d "$p" ] && [ -x "$p" ]; then echo {ABSENT}; '
    f"else echo {PRESENT}; fi\n"
)


def command(script: str, directory: str, **variables: str) -> str:
    """The shell command that runs `script` with D=directory and the given variables: as the
    login user when it can write there, else under `sudo -n`."""
    assigned = "".join(f"{k}={shlex.quote(v)}\n" for k, v in {"D": directory, **variables}.items())
    body = shlex.quote(assigned + script)
    parent = shlex.quote(directory)
    return (
        f'if [ "$(id -u)" = 0 ] || {{ mkdir -p {parent} 2>/dev/null && [ -w {parent} ]; }}; '
        f"then exec bash -c {body}; else exec sudo -n bash -c {body}; fi"
    )


class StateUnavailable(EnvironmentProblem):
    """The controller's state directory cannot be used (unreachable, not writable, no flock)."""


def _holder(lines: list[str]) -> LockInfo | None:
    text = "\n".join(lines).strip()
    if not text:
        return None
    try:
        return LockInfo.from_dict(json.loads(text))
    except ValueError:
        return LockInfo("unknown", -1, "unknown", "unknown", "unknown")


def _unavailable(where: str, lines: list[str]) -> StateUnavailable:
    said = " ".join(line for line in lines if line.strip())[-300:]
    said = said.replace(UNWRITABLE, "").strip() or "no answer"
    return StateUnavailable(f"the state directory on {where} cannot be used: {said}")


def _rest(session: Session, first: str | None = None) -> list[str]:
    lines = [first] if first else []
    try:
        while (line := session.readline(5.0)) is not None:
            lines.append(line)
    except TimeoutError:
        pass
    return lines


class ControllerLock:
    """The cluster's provision lock on the controller; same shape as records.lock.InventoryLock."""

    def __init__(
        self,
        remote: Remote,
        inventory: str,
        *,
        run_id: str | None = None,
        command: str | None = None,
        directory: str = DEFAULT_DIR,
        ttl: int = TTL_S,
        heartbeat: float = HEARTBEAT_S,
    ) -> None:
        self.remote = remote
        self.inventory = inventory
        self.run_id, self.command = run_id, command
        self.directory = directory
        self.ttl, self.heartbeat = ttl, heartbeat
        self.where = f"controller {remote.where}:{directory}"
        self.info: LockInfo | None = None
        self.cleared_stale: LockInfo | None = None
        self.lost = threading.Event()
        self.lost_reason: str | None = None
        self._stop = threading.Event()
        self._session: Session | None = None
        self._talk = threading.Lock()  # one question to the holder shell at a time
        self._owed = 0  # answers asked for and not read yet (a slow controller)
        self._answered = 0.0  # monotonic time of the last answer

    def acquire(self) -> LockInfo:
        info = LockInfo.mine(self.inventory, self.run_id, self.command)
        holder = json.dumps(asdict(info))
        session = self.remote.open(command(LOCK_SCRIPT, self.directory, H=holder, T=str(self.ttl)))
        try:
            first = session.readline(ANSWER_S)
        except TimeoutError:
            session.close()
            raise StateUnavailable(f"{self.remote.where} did not answer the lock request") from None
        if first is not None and first.split(" ", 1)[0] == TAKEN:
            self._session, self.info = session, info
            self.cleared_stale = _holder(first.split(" ", 1)[1:])
            self._answered = time.monotonic()
            threading.Thread(target=self._beat, daemon=True, name="kiln-lock-heartbeat").start()
            return info
        lines = _rest(session, first)
        session.close()
        if first == HELD:
            found = _holder(lines[1:])
            raise EnvironmentProblem(
                f"the cluster is locked on {self.where} by "
                + (found.describe() if found else "another run (starting)"),
                hint="wait for that run to end; the lock is freed when its SSH session closes "
                f"(kiln unlock {self.inventory} shows the holder)",
            )
        raise _unavailable(self.remote.where, lines)

    def _lose(self, why: str) -> None:
        if not self.lost.is_set() and not self._stop.is_set():  # not our own release
            self.lost_reason = why
            self.lost.set()

    def _ask(self, timeout: float) -> bool:
        """Send one line, read the answers owed: True when the shell says it still holds the
        lock, False when it did not answer in `timeout` (undecided); a lost lock sets `lost`."""
        with self._talk:
            session = self._session
            if self.lost.is_set() or session is None:
                return False
            try:
                session.send(b"\n")
            except Exception:  # noqa: BLE001 - the channel is gone: so is the lock
                self._lose(
                    "its session on the controller closed (the holder shell ended, or "
                    "the connection dropped)"
                )
                return False
            self._owed += 1
            while self._owed:
                try:
                    line = session.readline(timeout)
                except TimeoutError:
                    return False
                if line is None:
                    self._lose("its holder shell on the controller ended (killed, or timed out)")
                    return False
                if line.startswith(GONE):
                    self._lose(line[len(GONE) :].strip())
                    return False
                self._owed -= line == STILL
            self._answered = time.monotonic()
            return True

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat) and not self.lost.is_set():
            answered = self._ask(ANSWER_S)
            if not answered and time.monotonic() - self._answered > self.ttl:
                self._lose(f"the controller has not answered for {self.ttl} s")

    def check(self) -> None:
        """Raise LockLost unless the controller confirms, now, that this run holds the lock."""
        if not self.lost.is_set() and not self._ask(ANSWER_S) and not self.lost.is_set():
            self._lose(f"the controller did not confirm it within {ANSWER_S:g} s")
        if self.lost.is_set():
            raise LockLost(
                f"the cluster's lock on {self.where} was lost: {self.lost_reason}",
                hint="another run may hold it now (kiln unlock shows the holder)",
            )

    def release(self) -> None:
        self._stop.set()
        if self._session is not None:
            self._session.close()  # EOF on the holder's stdin: it exits, the lock is dropped
        self._session, self.info = None, None

    def __enter__(self) -> ControllerLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def probe(remote: Remote, directory: str = DEFAULT_DIR) -> LockInfo | None:
    """Who holds the lock on the controller now (None: nobody). Changes nothing."""
    lines = run(remote, command(PROBE_SCRIPT, directory))
    if lines and lines[0] == FREE:
        return None
    if lines and lines[0] == HELD:
        return _holder(lines[1:]) or LockInfo("unknown", -1, "unknown", "unknown", "unknown")
    raise _unavailable(remote.where, lines)


def read_state(remote: Remote, directory: str = DEFAULT_DIR) -> dict:
    """state.json on the controller ({} when there is none yet)."""
    lines = run(remote, command(READ_SCRIPT, directory))
    text = "\n".join(lines).strip()
    if not text:
        return {}
    try:
        state = json.loads(text)
    except ValueError as error:
        raise _unavailable(remote.where, [f"state.json is not JSON: {error}"]) from error
    return state if isinstance(state, dict) else {}


def state_dir_absent(remote: Remote, directory: str = DEFAULT_DIR) -> bool:
    """True only when the controller answers that nothing exists at `directory` (no kiln run
    ever kept state there); False when it exists or cannot be looked into. Raises
    RemoteUnavailable/TimeoutError when the controller does not answer, StateUnavailable on an
    answer it does not understand."""
    directory = directory.rstrip("/") or "/"
    script = f"D={shlex.quote(directory)}\n" + PRESENCE_SCRIPT
    lines = run(remote, f"exec bash -c {shlex.quote(script)}")
    if ABSENT in lines:
        return True
    if PRESENT in lines:
        return False
    raise _unavailable(remote.where, lines)


def update_state(remote: Remote, patch: dict, directory: str = DEFAULT_DIR) -> None:
    """Merge `patch` into state.json on the controller, under its update lock."""
    try:
        lines = run(
            remote,
            command(UPDATE_SCRIPT, directory, M=MERGE),
            stdin=json.dumps(patch).encode(),
        )
    except (RemoteUnavailable, TimeoutError) as error:
        raise _unavailable(remote.where, [str(error)]) from error
    if "KILN-STATE-SAVED" not in lines:
        raise _unavailable(remote.where, lines)
