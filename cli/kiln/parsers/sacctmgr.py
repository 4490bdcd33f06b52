"""sacctmgr: what slurmdbd holds for one cluster (the QoS, accounts, associations and users),
from the `sacctmgr --noheader --parsable2 show` commands `reads` names (parse_database), and
Slurm's duration format (duration_minutes). kiln.accounting compares it with
kiln_slurm.accounting.

Values are kept the way they compare: TRES as a name -> count mapping (mem in megabytes),
MaxWall in minutes, QoS lists as sets, so "2-00:00:00" declared and "2880" stored are equal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kiln.parsers import ParseError

# One query per kind; --noheader --parsable2: '|'-separated fields in this order, no trailer.
QOS_FORMAT = ("Name", "Priority", "MaxWall", "GrpTRES", "MaxTRESPU", "MaxJobsPU")
ACCOUNT_FORMAT = ("Account", "Descr", "Org")
ASSOC_FORMAT = (
    "Account",
    "User",
    "ParentName",
    "Fairshare",
    "GrpTRES",
    "MaxWall",
    "MaxJobs",
    "QOS",
    "DefaultQOS",
)
USER_FORMAT = ("User", "DefaultAccount", "AdminLevel")

_MEMORY = re.compile(r"^(\d+)([KMGTP]?)$")
_TO_MEGABYTES = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def reads(cluster: str) -> dict[str, list[str]]:
    """The sacctmgr commands that read the database, by kind (the cluster's associations only:
    one slurmdbd may serve several clusters)."""

    def show(what: str, columns: tuple[str, ...], *where: str) -> list[str]:
        return [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            what,
            *where,
            "format=" + ",".join(columns),
        ]

    return {
        "qos": show("qos", QOS_FORMAT),
        "accounts": show("account", ACCOUNT_FORMAT),
        # wopl: each association's own limits, not those it inherits from its parents (which
        # a plain `show association` prints in the children's columns too).
        "associations": show("association", ASSOC_FORMAT, f"cluster={cluster}", "wopl"),
        "users": show("user", USER_FORMAT),
    }


def duration_minutes(text: str) -> int:
    """A Slurm duration in whole minutes, as slurmdbd stores MaxWall ("2-00:00:00" -> 2880;
    a bare number is minutes, "MM:SS" rounds a part minute up)."""
    days, _, clock = text.rpartition("-") if "-" in text else ("0", "", text)
    parts = [int(p) for p in clock.split(":")]
    if not days or days == "0":
        if len(parts) == 1:
            return parts[0]
        if len(parts) == 2:  # MM:SS
            return parts[0] + (1 if parts[1] else 0)
        hours, minutes, seconds = parts
    else:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (parts + [0, 0])[:3]
        hours += int(days) * 24
    return hours * 60 + minutes + (1 if seconds else 0)


def tres(text: str) -> dict[str, int]:
    """'cpu=4,mem=100G,gres/gpu=8' -> {'cpu': 4, 'mem': 102400, 'gres/gpu': 8}."""
    counts: dict[str, int] = {}
    for item in filter(None, text.split(",")):
        name, sep, value = item.partition("=")
        memory = _MEMORY.match(value)
        if not sep or memory is None:
            raise ParseError("sacctmgr", f"TRES {item!r} is not name=count")
        number, unit = memory.groups()
        counts[name] = int(int(number) * _TO_MEGABYTES[unit]) if name == "mem" else int(number)
    return counts


def wall(text: str) -> int | None:
    return duration_minutes(text) if text else None


def count(text: str) -> int | None:
    return int(text) if text else None


@dataclass(frozen=True, slots=True)
class Qos:
    priority: int = 0
    max_wall: int | None = None
    grp_tres: dict[str, int] = field(default_factory=dict)
    max_tres_per_user: dict[str, int] = field(default_factory=dict)
    max_jobs_per_user: int | None = None


@dataclass(frozen=True, slots=True)
class Association:
    """An account's own association (user '') or a user's in an account."""

    parent: str = ""  # an account association's parent account
    fairshare: str = "1"  # a count, or "parent"
    grp_tres: dict[str, int] = field(default_factory=dict)
    max_wall: int | None = None
    max_jobs: int | None = None
    qos: frozenset[str] = frozenset()
    default_qos: str = ""


@dataclass(frozen=True, slots=True)
class Account:
    description: str = ""  # sacctmgr stores both in lower case
    organization: str = ""


@dataclass(frozen=True, slots=True)
class User:
    default_account: str = ""
    admin: str = "none"  # none, operator, administrator


@dataclass(frozen=True, slots=True)
class Database:
    qos: dict[str, Qos]
    accounts: dict[str, Account]
    associations: dict[tuple[str, str], Association]  # (account, user)
    users: dict[str, User]

    @classmethod
    def empty(cls) -> Database:
        return cls({}, {}, {}, {})


def _rows(text: str, columns: tuple[str, ...], what: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != len(columns):
            raise ParseError(
                "sacctmgr",
                f"show {what}: {len(fields)} fields, not {len(columns)} ({','.join(columns)})",
                line=line,
            )
        rows.append(fields)
    return rows


def parse_database(outputs: dict[str, str]) -> Database:
    """The database as the four READS printed it (by kind)."""
    qos = {
        name: Qos(int(priority or 0), wall(max_wall), tres(grp), tres(per_user), count(jobs))
        for name, priority, max_wall, grp, per_user, jobs in _rows(
            outputs["qos"], QOS_FORMAT, "qos"
        )
    }
    accounts = {
        name: Account(description, organization)
        for name, description, organization in _rows(outputs["accounts"], ACCOUNT_FORMAT, "account")
    }
    associations = {
        (account, user): Association(
            parent,
            share,
            tres(grp),
            wall(max_wall),
            count(jobs),
            frozenset(filter(None, qos_list.split(","))),
            default_qos,
        )
        for account, user, parent, share, grp, max_wall, jobs, qos_list, default_qos in _rows(
            outputs["associations"], ASSOC_FORMAT, "association"
        )
    }
    users = {
        name: User(default_account, admin.lower() or "none")
        for name, default_account, admin in _rows(outputs["users"], USER_FORMAT, "user")
    }
    return Database(qos, accounts, associations, users)
