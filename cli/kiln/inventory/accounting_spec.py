"""kiln_slurm.accounting as data: the QoS, the account tree, the users and their limits.

`accounting: true` runs slurmdbd and records jobs; a mapping does that too and declares what
`sacctmgr` holds (issue 31). kiln adds what is declared and sets each declared entity's limits
to exactly what is declared (a limit taken out of the inventory is cleared on the cluster);
accounts, users and QoS that exist only in the database are kept unless `prune: true`.
kiln.accounting turns this and the database's answer into sacctmgr commands.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

# Slurm's names for accounts, users and QoS: what sacctmgr takes unquoted, lower case (sacctmgr
# folds account and QoS names to lower case, so a capital would never compare equal).
NAME = re.compile(r"^[a-z_][a-z0-9._-]{0,63}$")
# Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
SLURM_DURATION = re.compile(r"^(\d+-)?\d+(:\d{2}){0,2}$")
# The TRES limits kiln declares; their values are counts (mem in megabytes).
TRES = ("cpu", "mem", "node", "billing", "gres/gpu")
Enforce = Literal["associations", "limits", "qos", "safe", "wckeys", "nojobs", "nosteps"]
# Made by Slurm itself with the cluster: never declared away, never pruned.
BUILTIN_ACCOUNT = "root"
BUILTIN_USER = "root"
BUILTIN_QOS = "normal"


def _check_tres(value: dict[str, int]) -> dict[str, int]:
    for name, count in value.items():
        if name not in TRES:
            raise ValueError(f"TRES {name!r} is not one of {', '.join(TRES)}")
        if count < 0:
            raise ValueError(f"TRES {name}: {count} is negative")
    return value


def _check_duration(value: str | None) -> str | None:
    if value is not None and not SLURM_DURATION.match(value):
        raise ValueError(f"{value!r} is not a Slurm duration (minutes, HH:MM:SS, D-HH:MM:SS)")
    return value


class _Spec(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Limits(_Spec):
    """Limits of an association (an account's, or a user's in each of its accounts)."""

    fairshare: int = Field(1, ge=1, le=1_000_000, description="its fairshare (Slurm's default 1)")
    grp_tres: dict[str, int] = Field(
        default_factory=dict,
        description="GrpTRES: what all jobs of the association use at once, e.g. {gres/gpu: 64}",
    )
    max_wall: str | None = Field(None, description="MaxWall per job, e.g. 2-00:00:00")
    max_jobs_per_user: int | None = Field(
        None, ge=0, description="MaxJobs: running jobs per user of the association"
    )
    qos: list[str] | None = Field(
        None, description="the QoS its jobs may use (unset: the parent's)"
    )
    default_qos: str | None = Field(None, description="the QoS a job gets without --qos")

    _tres = field_validator("grp_tres")(_check_tres)
    _duration = field_validator("max_wall")(_check_duration)

    @model_validator(mode="after")
    def _default_among_allowed(self) -> Limits:
        if self.default_qos and self.qos is not None and self.default_qos not in self.qos:
            raise ValueError(f"default_qos {self.default_qos!r} is not in its qos list")
        return self


class AccountSpec(Limits):
    parent: str = Field(BUILTIN_ACCOUNT, description="the parent account (default root)")
    description: str = Field("", max_length=200, description="sacctmgr Description")
    organization: str = Field("", max_length=200, description="sacctmgr Organization")

    @field_validator("description", "organization")
    @classmethod
    def _printable(cls, value: str) -> str:
        # It reaches sacctmgr as one argv word and comes back in its '|'-separated output.
        if "|" in value or "\n" in value or "'" in value or '"' in value:
            raise ValueError("must not contain | quotes or newlines")
        return value


class UserSpec(Limits):
    accounts: list[str] = Field(min_length=1, description="the accounts the user runs jobs in")
    default_account: str | None = Field(None, description="default: the first of accounts")
    admin: Literal["none", "operator", "administrator"] = Field(
        "none", description="Slurm AdminLevel"
    )

    @model_validator(mode="after")
    def _default_is_one_of_them(self) -> UserSpec:
        if self.default_account is not None and self.default_account not in self.accounts:
            raise ValueError(f"default_account {self.default_account!r} is not in its accounts")
        return self

    @property
    def default(self) -> str:
        return self.default_account or self.accounts[0]


class QosSpec(_Spec):
    priority: int = Field(0, ge=0, description="Priority")
    max_wall: str | None = Field(None, description="MaxWall per job")
    grp_tres: dict[str, int] = Field(default_factory=dict, description="GrpTRES of the QoS")
    max_tres_per_user: dict[str, int] = Field(default_factory=dict, description="MaxTRESPerUser")
    max_jobs_per_user: int | None = Field(None, ge=0, description="MaxJobsPerUser")

    _tres = field_validator("grp_tres", "max_tres_per_user")(_check_tres)
    _duration = field_validator("max_wall")(_check_duration)


class AccountingSpec(_Spec):
    enforce: list[Enforce] = Field(
        default_factory=lambda: ["associations", "limits", "qos"],
        description="AccountingStorageEnforce: jobs need an association, limits hold",
    )
    prune: bool = Field(
        False, description="remove accounts, users and QoS the database holds but kiln does not"
    )
    qos: dict[str, QosSpec] = Field(default_factory=dict, description="QoS by name")
    accounts: dict[str, AccountSpec] = Field(default_factory=dict, description="by name")
    users: dict[str, UserSpec] = Field(default_factory=dict, description="by login name")

    @field_validator("qos", "accounts", "users")
    @classmethod
    def _names(cls, value: dict) -> dict:
        for name in value:
            if not NAME.match(name):
                raise ValueError(
                    f"{name!r} is not a Slurm name (lower case letters, digits, . _ -)"
                )
        return value

    @model_validator(mode="after")
    def _references(self) -> AccountingSpec:
        problems = [*self._tree_problems(), *self._reference_problems()]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _tree_problems(self) -> list[str]:
        problems = []
        if BUILTIN_ACCOUNT in self.accounts:
            problems.append("account root is Slurm's own (the tree's top): declare below it")
        for name, account in self.accounts.items():
            if account.parent != BUILTIN_ACCOUNT and account.parent not in self.accounts:
                problems.append(f"account {name}: parent {account.parent!r} is not declared")
        cycles: set[frozenset[str]] = set()
        for name in self.accounts:
            seen = [name]
            parent = self.accounts[name].parent
            while parent in self.accounts:
                if parent in seen:
                    cycle = seen[seen.index(parent) :]
                    if frozenset(cycle) not in cycles:
                        cycles.add(frozenset(cycle))
                        problems.append(f"accounts {' -> '.join([*cycle, parent])} form a cycle")
                    break
                seen.append(parent)
                parent = self.accounts[parent].parent
        return problems

    def _reference_problems(self) -> list[str]:
        known_qos = {BUILTIN_QOS, *self.qos}
        known_accounts = {BUILTIN_ACCOUNT, *self.accounts}
        problems = []
        holders: list[tuple[str, Limits]] = [
            *((f"account {n}", a) for n, a in self.accounts.items()),
            *((f"user {n}", u) for n, u in self.users.items()),
        ]
        for who, limits in holders:
            for qos in [*(limits.qos or []), *([limits.default_qos] if limits.default_qos else [])]:
                if qos not in known_qos:
                    problems.append(f"{who}: QoS {qos!r} is not declared")
        for name, user in self.users.items():
            for account in user.accounts:
                if account not in known_accounts:
                    problems.append(f"user {name}: account {account!r} is not declared")
        return problems

    def tree_order(self) -> list[str]:
        """The declared accounts, every parent before its children (the order to add them)."""
        ordered: list[str] = []
        placed = {BUILTIN_ACCOUNT}
        while len(ordered) < len(self.accounts):
            ready = [n for n, a in self.accounts.items() if n not in placed and a.parent in placed]
            if not ready:  # a cycle: the validator has refused it already
                break
            ordered.extend(sorted(ready))
            placed.update(ready)
        return ordered


SWITCH, DECLARED = "accounting-switch", "accounting-declared"  # left out of error locations
# kiln_slurm.accounting: a switch, or a declaration (a mapping). Told apart by the value's
# shape, so a bad declaration is reported as one, not also as "not a boolean".
Accounting = Annotated[
    Annotated[bool, Tag(SWITCH)] | Annotated[AccountingSpec, Tag(DECLARED)],
    Discriminator(lambda value: DECLARED if isinstance(value, dict | AccountingSpec) else SWITCH),
]
