"""The command lines kiln runs on the Slurm controller, built with shlex.quote.

Every Slurm command kiln issues is built here: sinfo and `scontrol show node` (node state),
drain and resume, burn-in's reservations, sbatch, squeue (kiln's jobs, and the jobs holding a
set of nodes) and scancel. Every value that reaches a remote shell goes through `shlex.quote`,
so a drain reason holding quotes, semicolons or `$(...)` arrives at scontrol as one argument
and is never interpreted. Text that cannot be stored as a one-line Slurm reason (newlines,
control characters, too long) is refused before anything is run.
"""

from __future__ import annotations

import getpass
import shlex
import unicodedata
from collections.abc import Iterable, Sequence

from kiln.errors import InvalidInputError
from kiln.parsers.drain_reason import operator_reason, safe_user
from kiln.render.hostlist import compress

REASON_TEXT_MAX = 100  # characters of the operator's text; `sinfo -R` and people read these
# sinfo columns, aggregated: nodes with equal values share one line and a hostlist, so
# 12,500 idle nodes are one line. The reason goes last: it may hold "|".
SINFO_FIELDS = ("node", "state", "gres", "user", "time", "reason")
SINFO_FORMAT = "%N|%T|%G|%u|%H|%E"
STEP_MARK = "@@kiln-step"


def check_reason(text: str) -> str:
    """The operator's reason text, trimmed; InvalidInputError when Slurm cannot keep it."""
    stripped = text.strip()
    if not stripped:
        raise InvalidInputError("--reason is empty", hint="say why, e.g. --reason 'disk swap'")
    bad = [ch for ch in stripped if unicodedata.category(ch).startswith("C")]
    if bad:
        raise InvalidInputError(
            f"--reason holds a newline or control character ({bad[0]!r}); a Slurm reason is "
            "one line of printable text"
        )
    if len(stripped) > REASON_TEXT_MAX:
        raise InvalidInputError(
            f"--reason is {len(stripped)} characters; at most {REASON_TEXT_MAX}",
            hint="keep the reason short; put details in a ticket and name it",
        )
    return stripped


def local_user() -> str:
    """Who runs kiln here, reduced to characters that are safe in a reason."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = "unknown"
    return safe_user(name)[:32] or "unknown"


def kiln_reason(text: str, user: str | None = None) -> str:
    """The reason `kiln drain` stores: `kiln:operator:USER: TEXT` (kiln.parsers.drain_reason)."""
    return operator_reason(check_reason(text), user or local_user())


def nodelist(names: Iterable[str]) -> str:
    """One Slurm hostlist for scontrol/sinfo: short even for thousands of nodes."""
    names = list(names)
    if not names:
        raise ValueError("no node names")
    return compress(names)


def sinfo(names: Sequence[str] | None = None) -> list[str]:
    argv = ["sinfo", "--noheader", "--format", SINFO_FORMAT]
    return argv + (["--nodes", nodelist(names)] if names else [])


def show_nodes(names: Sequence[str]) -> list[str]:
    return ["scontrol", "show", "node", nodelist(names)]


def drain(names: Sequence[str], reason: str) -> list[str]:
    """`reason` is the full stored reason (see `kiln_reason`); it stays one argv element."""
    return ["scontrol", "update", f"nodename={nodelist(names)}", "state=drain", f"reason={reason}"]


def resume(names: Sequence[str]) -> list[str]:
    return ["scontrol", "update", f"nodename={nodelist(names)}", "state=resume"]


def create_reservation(name: str, names: Sequence[str], minutes: int) -> list[str]:
    """A maintenance reservation for root: no other job starts on the nodes while it exists,
    jobs already running are left alone (ignore_jobs)."""
    return [
        "scontrol", "create", "reservation", f"reservationname={name}", "starttime=now",
        f"duration={minutes}", "users=root", "flags=maint,ignore_jobs",
        f"nodes={nodelist(names)}",
    ]  # fmt: skip


def delete_reservation(name: str) -> list[str]:
    return ["scontrol", "delete", f"reservationname={name}"]


def show_reservations() -> list[str]:
    return ["scontrol", "--oneliner", "show", "reservation"]


def jobs_by_reservation() -> list[str]:
    """Every job with the reservation it runs in: `id|reservation` a line."""
    return ["squeue", "--noheader", "--all", "--format=%i|%v"]


def reservation_nodes(name: str, names: Sequence[str]) -> list[str]:
    """Set the reservation's nodes to exactly `names` (burn-in lets busy nodes go)."""
    return ["scontrol", "update", f"reservationname={name}", f"nodes={nodelist(names)}"]


# Job states in which a job holds its nodes (a pending job holds none).
HOLDING_STATES = "CONFIGURING,RUNNING,COMPLETING,SUSPENDED,STOPPED"
JOBS_ON_FORMAT = "%i|%T|%u|%v|%N"  # id, state, user, reservation, nodes (a hostlist)


def jobs_on(names: Sequence[str]) -> list[str]:
    """Jobs holding any of these nodes, every partition: `id|state|user|reservation|nodes`."""
    return [
        "squeue", "--noheader", "--all", f"--nodelist={nodelist(names)}",
        f"--states={HOLDING_STATES}", f"--format={JOBS_ON_FORMAT}",
    ]  # fmt: skip


def squeue(job_ids: Sequence[str]) -> list[str]:
    """Jobs still known to slurmctld, one `id|state|reason` line per job (array tasks too)."""
    return ["squeue", "--noheader", "--array", f"--jobs={','.join(job_ids)}", "--format=%i|%T|%r"]


def scancel(job_ids: Sequence[str]) -> list[str]:
    return ["scancel", *job_ids]


def sbatch(script: str) -> str:
    """Submit a job script from a here-document; prints the job id (--parsable). Shell text,
    not argv: the script travels on sbatch's stdin, so it runs alone (Controller.submit)."""
    marker = "KILN_BURNIN_JOB"
    while marker in script:
        marker += "_"
    return f"sbatch --parsable <<'{marker}'\n{script}{marker}\n"


def sbatch_many(scripts: Sequence[str]) -> str:
    """Several job scripts submitted in one remote shell, each framed like a `script` step,
    so one SSH exec carries them (one job per node scales to thousands of nodes)."""
    return "\n".join(
        f"echo '{STEP_MARK} {index}'\n{sbatch(text)}echo \"{STEP_MARK}-rc $?\""
        for index, text in enumerate(scripts)
    )


def job_id(output: str) -> str | None:
    """The job id `sbatch --parsable` printed ("17" or "17;cluster"); None when there is none."""
    lines = output.strip().splitlines()
    found = lines[-1].split(";")[0].strip() if lines else ""
    return found if found.isdigit() else None


def script(steps: Sequence[Sequence[str]]) -> str:
    """One remote shell script running `steps` in order, each framed by markers with its exit
    code, so one SSH exec carries a before/after pair. stderr stays on the channel's stderr."""
    lines = []
    for index, argv in enumerate(steps):
        lines.append(f"echo '{STEP_MARK} {index}'; {shlex.join(argv)}; echo \"{STEP_MARK}-rc $?\"")
    return "\n".join(lines)


def split_steps(output: str, count: int) -> list[tuple[int | None, str]]:
    """(exit code, output) per step of `script`; (None, "") for a step that never ran."""
    steps: list[tuple[int | None, str]] = [(None, "")] * count
    current: int | None = None
    body: list[str] = []
    for line in output.splitlines():
        if line.startswith(f"{STEP_MARK} "):
            current, body = int(line.split()[1]), []
        elif line.startswith(f"{STEP_MARK}-rc ") and current is not None:
            steps[current] = (int(line.split()[1]), "\n".join(body))
            current = None
        elif current is not None:
            body.append(line)
    return steps
