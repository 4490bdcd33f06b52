"""What the roles fetch on one node: their tasks walked in play order, without the node.

    found = walk_playbook(PLAYBOOKS_DIR / "site.yml", groups, host_vars, facts)
    found[0]  # Fetch(module="ansible.builtin.apt", args={"name": [...]}, where="roles/...:12", ...)

The walk follows what Ansible would run: import_playbook, each play whose hosts take in the
node's groups, its roles (defaults, vars/main.yml), blocks, import_tasks and include_tasks,
include_vars, include_role, set_fact, register. Every task of a module that fetches
(FETCHING) is rendered in its scope and returned with its file:line. A `when:` that is false
skips; one that only the node can decide (a registered result, the installed packages) is
walked anyway and recorded on what it yields, because either way the node may need it. What
a task's arguments need from the node is kept as the reason it is unresolved.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from kiln.artifacts.scope import OMIT, HostLayers, Scope, Unresolved, unknown

# The modules that bring something onto a node from elsewhere, short names.
FETCHING = frozenset(
    {"apt", "dnf", "yum", "package", "pip", "get_url", "unarchive", "apt_repository",
     "deb822_repository", "yum_repository", "rpm_key", "apt_key"}
)  # fmt: skip
# Where a templated file is a repository: apt's source lists, dnf's repository files.
SOURCE_LISTS = ("/etc/apt/sources.list.d/", "/etc/yum.repos.d/")
_INCLUDES = {"include_tasks", "import_tasks"}
_ROLES = {"include_role", "import_role"}
_KEYWORDS = {
    "name", "when", "vars", "register", "loop", "with_items", "loop_control", "tags", "become",
    "changed_when", "failed_when", "check_mode", "notify", "delegate_to", "run_once", "until",
    "retries", "delay", "no_log", "environment", "listen", "ignore_errors", "throttle",
    "any_errors_fatal", "become_user", "timeout", "diff", "args", "block", "rescue", "always",
}  # fmt: skip


@dataclass(frozen=True)
class Fetch:
    """One fetching task as this node would run it."""

    module: str  # short name: apt, dnf, package, pip, get_url, ...
    args: dict[str, Any]  # rendered; a value only the node knows is left out
    where: str  # playbooks-relative file:line
    role: str
    conditions: tuple[str, ...] = ()  # `when:`s only the node decides, outermost first
    unresolved: tuple[str, ...] = ()  # why an argument could not be rendered
    asked: frozenset[str] = frozenset()  # the task's argument names, rendered or not


@dataclass
class _Walk:
    root: Path
    found: list[Fetch] = field(default_factory=list)
    depth: int = 0


def _short(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def _task_module(task: dict) -> str | None:
    for key in task:
        if key not in _KEYWORDS and not key.startswith("with_"):
            return key
    return None


def _load(path: Path) -> list:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data or []


def _task_lines(path: Path) -> dict[str, int]:
    """Line of every mapping in the file by its path of indexes ("0", "0/block/2", ...)."""
    out: dict[str, int] = {}

    def visit(node: yaml.Node, key: str) -> None:
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                visit(item, f"{key}/{i}" if key else str(i))
        elif isinstance(node, yaml.MappingNode):
            out[key] = node.start_mark.line + 1
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value in ("block", "rescue", "always"):
                    visit(v, f"{key}/{k.value}")

    root = yaml.compose(path.read_text(encoding="utf-8"))
    if root is not None:
        visit(root, "")
    return out


def _role_vars(role_dir: Path, kind: str) -> dict[str, Any]:
    path = role_dir / kind / "main.yml"
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.exists() else {}


def walk_playbook(
    playbook: Path, groups: set[str], host_vars: dict[str, Any], facts: dict[str, Any]
) -> list[Fetch]:
    """Every fetching task a node in `groups` with these variables and facts would run."""
    walk = _Walk(root=playbook.parent)
    high = HostLayers()
    _playbook(walk, playbook, groups, {**host_vars, **facts}, high)
    return walk.found


def _playbook(walk: _Walk, path: Path, groups: set[str], inventory: dict, high: HostLayers):
    for play in _load(path):
        target = play.get("ansible.builtin.import_playbook") or play.get("import_playbook")
        if target:
            _playbook(walk, path.parent / target, groups, inventory, high)
            continue
        hosts = str(play.get("hosts", ""))
        if not set(hosts.replace(",", ":").split(":")) & (groups | {"all"}):
            continue
        play_vars = play.get("vars") or {}
        for entry in play.get("roles") or []:
            name = entry if isinstance(entry, str) else entry.get("role") or entry.get("name")
            params = {} if isinstance(entry, str) else (entry.get("vars") or {})
            role_dir = walk.root / "roles" / name
            layers = [_role_vars(role_dir, "defaults"), inventory, play_vars]
            scope = Scope([*layers, _role_vars(role_dir, "vars")], high)
            scope = scope.child({"role_path": str(role_dir), "role_name": name})
            scope = scope.child(params, params=True)
            when = entry.get("when") if isinstance(entry, dict) else None
            conditions = _decide(scope, when)
            if conditions is not None:
                _tasks(walk, role_dir / "tasks" / "main.yml", scope, name, conditions)


def _decide(scope: Scope, when: Any) -> tuple[str, ...] | None:
    """None when `when` is false here; else the conditions left to the node (maybe none)."""
    if when is None:
        return ()
    try:
        return () if scope.condition(when) else None
    except Unresolved:
        return (str(when),)


@dataclass(frozen=True)
class _At:
    """Where the walk is: the task file and its lines, the scope, the role, the conditions
    only the node decides that the tasks here are under."""

    path: Path
    lines: dict[str, int]
    scope: Scope
    role: str
    conditions: tuple[str, ...]

    def where(self, walk: _Walk, key: str) -> str:
        return f"{self.path.relative_to(walk.root)}:{self.lines.get(key, 0)}"


def _tasks(walk: _Walk, path: Path, scope: Scope, role: str, conditions: tuple[str, ...]):
    if walk.depth > 20 or not path.exists():  # an include of itself: no deeper than this
        return
    walk.depth += 1
    try:
        _list(walk, _At(path, _task_lines(path), scope, role, conditions), _load(path), "")
    finally:
        walk.depth -= 1


def _list(walk: _Walk, at: _At, tasks: list | None, prefix: str) -> None:
    for i, task in enumerate(tasks or []):
        _task(walk, at, task, f"{prefix}/{i}" if prefix else str(i))


def _task(walk: _Walk, at: _At, task: dict, key: str) -> None:
    scope = at.scope.child(task.get("vars"))
    decided = _decide(scope, task.get("when"))
    if decided is None:
        return
    at = replace(at, scope=scope, conditions=at.conditions + decided)
    if "block" in task:
        for part in ("block", "always"):
            _list(walk, at, task.get(part), f"{key}/{part}")
        return
    module = _task_module(task)
    if module is None:
        return
    short, args, where = _short(module), task[module], at.where(walk, key)
    if short in _INCLUDES:
        _include_tasks(walk, at, args)
    elif short == "include_vars":
        _include_vars(at, args)
    elif short in _ROLES:
        _include_role(walk, args, scope, at.conditions)
    elif short == "set_fact":  # rendered now, as Ansible does (a fact may build on its old value)
        for name, value in args.items():
            if name == "cacheable":
                continue
            try:
                scope.high.facts[name] = scope.render(value)
            except Unresolved as exc:
                scope.high.facts[name] = unknown(str(exc))
    elif short in FETCHING:
        _fetch(walk, at, short, args, task, where)
    elif short == "template" and _is_source_list(args, scope):
        _source_list(walk, at, args, where)
    if task.get("register"):
        scope.high.facts[task["register"]] = unknown(
            f"{task['register']} is what the node reports at play time ({where})"
        )


def _include_tasks(walk: _Walk, at: _At, args: Any) -> None:
    target = args.get("file") if isinstance(args, dict) else args
    try:
        name = str(at.scope.render(target))
    except Unresolved:
        return  # a file only the node names: nothing the plan can walk
    file = Path(name) if name.startswith("/") else at.path.parent / name
    _tasks(walk, file, at.scope, at.role, at.conditions)


def _include_vars(at: _At, args: Any) -> None:
    target = args.get("file") if isinstance(args, dict) else args
    try:
        name = str(at.scope.render(target))
    except Unresolved:
        return
    file = Path(name) if name.startswith("/") else at.path.parent.parent / "vars" / name
    if file.exists():
        at.scope.high.included.update(yaml.safe_load(file.read_text(encoding="utf-8")) or {})


def _is_source_list(args: Any, scope: Scope) -> bool:
    """A template that writes a package manager's source list (a repository by another name)."""
    try:
        dest = str(scope.render(args.get("dest", ""))) if isinstance(args, dict) else ""
    except Unresolved:
        return False
    return dest.startswith(SOURCE_LISTS)


def _source_list(walk: _Walk, at: _At, args: dict, where: str) -> None:
    """The repositories a templated source list names: the template rendered as the role would."""
    try:
        template = at.path.parent.parent / "templates" / str(at.scope.render(args["src"]))
        content = str(at.scope.render(template.read_text(encoding="utf-8")))
        dest = at.scope.render(args["dest"])
        missing: tuple[str, ...] = ()
    except (Unresolved, OSError) as exc:
        content, dest, missing = "", args.get("dest", ""), (f"{args.get('src')}: {exc}",)
    walk.found.append(
        Fetch("template", {"content": content, "dest": dest}, where,
              _role_of(where, at.role), at.conditions, missing, frozenset(args))
    )  # fmt: skip


def _role_of(where: str, role: str) -> str:
    """The role whose file a task is in (a task reached through another role's include)."""
    parts = where.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "roles" else role


def _include_role(walk: _Walk, args: dict, scope: Scope, conditions: tuple[str, ...]) -> None:
    try:
        name = str(scope.render(args.get("name")))
        tasks_from = str(scope.render(args.get("tasks_from", "main")))
    except Unresolved:
        return  # a role only the node names: nothing the plan can walk
    role_dir = walk.root / "roles" / name
    file = role_dir / "tasks" / (tasks_from if tasks_from.endswith(".yml") else f"{tasks_from}.yml")
    inner = Scope(
        [_role_vars(role_dir, "defaults"), *scope.low, _role_vars(role_dir, "vars")],
        scope.high, scope.stack, scope.params,
    ).child({"role_path": str(role_dir), "role_name": name})  # fmt: skip
    _tasks(walk, file, inner, name, conditions)


def _fetch(walk: _Walk, at: _At, short: str, args: Any, task: dict, where: str) -> None:
    if not isinstance(args, dict):
        return
    items: list[Any] = [None]
    loop = task.get("loop", task.get("with_items"))
    unresolved: list[str] = []
    if loop is not None:
        try:
            items = list(at.scope.render(loop))
        except Unresolved as exc:
            unresolved.append(f"loop: {exc}")
            items = []
    for item in items:
        here = at.scope.child({"item": item}) if item is not None else at.scope
        rendered: dict[str, Any] = {}
        missing = list(unresolved)
        for name, value in args.items():
            try:
                rendered[name] = here.render(value)
            except Unresolved as exc:
                missing.append(f"{name}: {exc}")
            if rendered.get(name) == OMIT:
                del rendered[name]
        walk.found.append(
            Fetch(short, rendered, where, _role_of(where, at.role), at.conditions,
                  tuple(missing), frozenset(args))
        )  # fmt: skip
