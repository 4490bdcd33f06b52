"""kiln_slurm.accounting against what slurmdbd holds: the sacctmgr commands that make the one
the other, in an order sacctmgr accepts (QoS before the accounts naming them, parents before
children, removals last and leaves first).

Declared entities get exactly the declared limits (a limit dropped from the inventory is cleared
with -1); entities only the database holds are removed only with `prune: true`, and Slurm's own
(account root, user root, QoS normal) never. Every command is scoped to this cluster's
associations where sacctmgr allows it. `kiln plan --live` shows the list; the slurm_dbd role runs
it (the filter kiln_sacctmgr_changes) and a second run finds nothing to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kiln.inventory.accounting_spec import (
    BUILTIN_ACCOUNT,
    BUILTIN_QOS,
    BUILTIN_USER,
    AccountingSpec,
    AccountSpec,
    Limits,
    QosSpec,
    UserSpec,
)
from kiln.inventory.schema import ansible_plain
from kiln.parsers.sacctmgr import (
    Account,
    Association,
    Database,
    Qos,
    duration_minutes,
    parse_database,
    reads,
)

Action = Literal["add", "modify", "remove"]
Kind = Literal["qos", "account", "user"]
_SIGN = {"add": "+", "modify": "~", "remove": "-"}
SACCTMGR = ("sacctmgr", "--immediate")


@dataclass(frozen=True, slots=True)
class Change:
    action: Action
    kind: Kind
    name: str
    argv: tuple[str, ...]

    def describe(self) -> str:
        """'+ account vision: sacctmgr --immediate add account vision ...' (plan lines)."""
        return f"{_SIGN[self.action]} {self.kind} {self.name}: {' '.join(self.argv)}"

    def to_dict(self) -> dict:
        return {
            "action": self.action,
            "kind": self.kind,
            "name": self.name,
            "argv": list(self.argv),
        }


def _minutes(text: str | None) -> int | None:
    return duration_minutes(text) if text is not None else None


def _scalar(key: str, desired: int | str | None, current: int | str | None) -> list[str]:
    if desired == current:
        return []
    return [f"{key}={-1 if desired is None else desired}"]


def _tres(key: str, desired: Mapping[str, int], current: Mapping[str, int]) -> list[str]:
    """One TRES setting: changed counts, and -1 for each count to clear."""
    items = [f"{name}={n}" for name, n in sorted(desired.items()) if current.get(name) != n]
    items += [f"{name}=-1" for name in sorted(current) if name not in desired]
    return [f"{key}={','.join(items)}"] if items else []


def association_settings(limits: Limits, current: Association) -> list[str]:
    settings = [
        *_scalar("Fairshare", str(limits.fairshare), current.fairshare),
        *_tres("GrpTRES", limits.grp_tres, current.grp_tres),
        *_scalar("MaxWall", _minutes(limits.max_wall), current.max_wall),
        *_scalar("MaxJobs", limits.max_jobs_per_user, current.max_jobs),
    ]
    if limits.qos is not None and frozenset(limits.qos) != current.qos:
        settings.append("QOS=" + ",".join(sorted(limits.qos)))
    if limits.default_qos and limits.default_qos != current.default_qos:
        settings.append(f"DefaultQOS={limits.default_qos}")
    return settings


def qos_settings(spec: QosSpec, current: Qos) -> list[str]:
    return [
        *_scalar("Priority", spec.priority, current.priority),
        *_scalar("MaxWall", _minutes(spec.max_wall), current.max_wall),
        *_tres("GrpTRES", spec.grp_tres, current.grp_tres),
        *_tres("MaxTRESPerUser", spec.max_tres_per_user, current.max_tres_per_user),
        *_scalar("MaxJobsPerUser", spec.max_jobs_per_user, current.max_jobs_per_user),
    ]


class _Planner:
    def __init__(self, spec: AccountingSpec, cluster: str, database: Database) -> None:
        self.spec = spec
        self.cluster = cluster
        self.db = database
        self.changes: list[Change] = []

    # sacctmgr's three verbs, as `sacctmgr add KIND NAME SETTINGS`, `sacctmgr modify KIND where
    # CONDITIONS set SETTINGS` and `sacctmgr remove KIND where CONDITIONS`.
    def add(self, kind: Kind, name: str, *settings: str) -> None:
        self.changes.append(Change("add", kind, name, (*SACCTMGR, "add", kind, name, *settings)))

    def modify(self, kind: Kind, name: str, where: list[str], settings: list[str]) -> None:
        argv = (*SACCTMGR, "modify", kind, "where", f"name={name}", *where, "set", *settings)
        self.changes.append(Change("modify", kind, name, argv))

    def remove(self, kind: Kind, name: str, *where: str) -> None:
        argv = (*SACCTMGR, "remove", kind, "where", f"name={name}", *where)
        self.changes.append(Change("remove", kind, name, argv))

    def qos(self) -> None:
        for name, spec in sorted(self.spec.qos.items()):
            current = self.db.qos.get(name)
            settings = qos_settings(spec, current or Qos())
            if current is None:
                self.add("qos", name, *settings)
            elif settings:
                self.modify("qos", name, [], settings)

    def account(self, name: str, spec: AccountSpec) -> None:
        cluster = f"cluster={self.cluster}"
        current = self.db.associations.get((name, ""))
        if current is None:
            described = [
                *([f"Description={spec.description}"] if spec.description else []),
                *([f"Organization={spec.organization}"] if spec.organization else []),
            ]
            settings = association_settings(spec, Association())
            parent = f"Parent={spec.parent}"
            self.add("account", name, f"Cluster={self.cluster}", parent, *described, *settings)
            return
        settings = association_settings(spec, current)
        if spec.parent != current.parent:
            settings.insert(0, f"Parent={spec.parent}")
        if settings:
            self.modify("account", name, [cluster], settings)
        # Description and Organization belong to the account, not to its association here;
        # sacctmgr keeps both in lower case.
        record = self.db.accounts.get(name, Account())
        described = [
            f"{key}={declared}"
            for key, declared, stored in (
                ("Description", spec.description, record.description),
                ("Organization", spec.organization, record.organization),
            )
            if declared and declared.lower() != stored
        ]
        if described:
            self.modify("account", name, [], described)

    def user(self, name: str, spec: UserSpec) -> None:
        cluster = f"cluster={self.cluster}"
        record = self.db.users.get(name)
        ordered = [spec.default, *(a for a in spec.accounts if a != spec.default)]
        for index, account in enumerate(ordered):
            current = self.db.associations.get((account, name))
            if current is None:
                first = record is None and index == 0  # the user's record comes with it
                extra = [f"DefaultAccount={account}"] if first else []
                if first and spec.admin != "none":
                    extra.append(f"AdminLevel={spec.admin}")
                settings = association_settings(spec, Association())
                self.add(
                    "user", name, f"Account={account}", f"Cluster={self.cluster}", *extra, *settings
                )
            elif settings := association_settings(spec, current):
                self.modify("user", name, [f"account={account}", cluster], settings)
        if record is None:
            return
        settings = [
            *_scalar("DefaultAccount", spec.default, record.default_account),
            *_scalar("AdminLevel", spec.admin, record.admin),
        ]
        if settings:
            self.modify("user", name, [], settings)

    def prune(self) -> None:
        cluster = f"cluster={self.cluster}"
        for account, user in sorted(self.db.associations):
            if not user or user == BUILTIN_USER:
                continue
            declared = self.spec.users.get(user)
            if declared is None or account not in declared.accounts:
                self.remove("user", user, f"account={account}", cluster)
        undeclared = [
            account
            for account, user in self.db.associations
            if not user and account != BUILTIN_ACCOUNT and account not in self.spec.accounts
        ]
        for account in sorted(undeclared, key=lambda a: (-self._depth(a), a)):
            self.remove("account", account, cluster)
        for name in sorted(set(self.db.qos) - set(self.spec.qos) - {BUILTIN_QOS}):
            self.remove("qos", name)

    def _depth(self, account: str) -> int:
        """How far below root the database puts `account` (removals go leaves first)."""
        depth, seen = 0, {account}
        while (parent := self.db.associations.get((account, ""), Association()).parent) and (
            parent not in seen
        ):
            depth, account = depth + 1, parent
            seen.add(parent)
        return depth


def changes(spec: AccountingSpec, cluster: str, database: Database) -> list[Change]:
    """What to run, in order, to bring `database` to `spec` for `cluster`; [] when it is."""
    planner = _Planner(spec, cluster, database)
    planner.qos()
    for name in spec.tree_order():
        planner.account(name, spec.accounts[name])
    for name, user in sorted(spec.users.items()):
        planner.user(name, user)
    if spec.prune:
        planner.prune()
    return planner.changes


def _reads_filter(cluster: str) -> list[dict]:
    return [{"kind": kind, "argv": argv} for kind, argv in reads(cluster).items()]


def _changes_filter(declared: Mapping, cluster: str, results: list[Mapping]) -> list[dict]:
    """`results`: the registered loop over kiln_sacctmgr_reads (item.kind, stdout)."""
    spec = AccountingSpec.model_validate(ansible_plain(declared))
    outputs = {result["item"]["kind"]: result["stdout"] for result in results}
    return [c.to_dict() for c in changes(spec, cluster, parse_database(outputs))]


# The slurm_dbd role's filters (playbooks/filter_plugins/kiln_slurm_filters.py).
FILTERS = {"kiln_sacctmgr_reads": _reads_filter, "kiln_sacctmgr_changes": _changes_filter}
