"""A role's variables as Ansible would see them on one node, rendered without the node.

    scope = Scope(low=[defaults, inventory_vars, role_vars], high=HostLayers())
    scope.render("{{ nccl_packages | map('regex_replace', '$', '=2.18.5') | list }}")
    scope.child({"item": "x"})       # task or block vars on top of the stack

`kiln mirror plan` reads the roles' own variables, so a version or a package name changes in
one place. Values are rendered lazily, on first read, with Jinja's native types (a template
that is one expression gives its object, as in Ansible) and with the filters the roles use:
Jinja's, Ansible's core filters and tests, and kiln's own (the filter_plugins shims). What
only the node can say (a registered result, a fact kiln cannot synthesise, a lookup) raises
Unresolved with the missing name; the plan reports it instead of guessing.

Precedence, lowest first (Ansible's, as far as the roles use it): role defaults, inventory
variables, play vars, role vars, block and task vars, include_vars, set_fact and register,
include_role vars.
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from jinja2.nativetypes import NativeEnvironment, native_concat

from kiln.paths import PLAYBOOKS_DIR

OMIT = "__kiln_omit__"  # Ansible's `omit`: an argument given as this is left out


class Unresolved(Exception):
    """A value that depends on what only the node can say (the reason names it)."""


class _Unknown:
    """A registered result or a fact of the node: defined, but not knowable here."""

    def __init__(self, why: str) -> None:
        self.why = why


def unknown(why: str) -> _Unknown:
    return _Unknown(why)


@dataclass
class HostLayers:
    """What a play accumulates on a host as it runs: include_vars, then set_fact/register."""

    included: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class Scope(Mapping[str, Any]):
    low: list[dict[str, Any]]  # defaults, inventory, play vars, role vars (lowest first)
    high: HostLayers
    stack: list[dict[str, Any]] = field(default_factory=list)  # block and task vars
    params: list[dict[str, Any]] = field(default_factory=list)  # include_role vars
    _busy: set[str] = field(default_factory=set)

    def child(self, extra: dict[str, Any] | None, params: bool = False) -> Scope:
        if not extra:
            return self
        if params:
            return Scope(self.low, self.high, self.stack, [*self.params, extra])
        return Scope(self.low, self.high, [*self.stack, extra], self.params)

    def _layers(self) -> Iterator[dict[str, Any]]:
        """Highest precedence first."""
        yield from reversed(self.params)
        yield self.high.facts
        yield self.high.included
        yield from reversed(self.stack)
        yield from reversed(self.low)
        yield _GLOBALS  # the shared context sees no Jinja globals: lookup and omit are here

    def __contains__(self, key: object) -> bool:
        return any(key in layer for layer in self._layers())

    def __getitem__(self, key: str) -> Any:
        for layer in self._layers():
            if key in layer:
                return self._value(key, layer[key])
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        seen: set[str] = set()
        for layer in self._layers():
            for key in layer:
                if key not in seen:
                    seen.add(key)
                    yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def _value(self, key: str, value: Any) -> Any:
        """A variable's value; one only the node knows is an Undefined that says why, raised
        only when a template uses it (Jinja looks every name up before it runs, so an `or`
        or an `if` that never reaches the name must not fail on it)."""
        if isinstance(value, _Unknown):
            return jinja2.StrictUndefined(hint=value.why)
        if key in self._busy:
            return jinja2.StrictUndefined(hint=f"{key} refers to itself")
        self._busy.add(key)
        try:
            return self.render(value)
        except Unresolved as exc:
            return jinja2.StrictUndefined(hint=str(exc))
        finally:
            self._busy.discard(key)

    def render(self, value: Any) -> Any:
        """`value` with every template in it rendered (strings, lists and dicts, recursively)."""
        if isinstance(value, str):
            return self._template(value) if ("{{" in value or "{%" in value) else value
        if isinstance(value, list):
            return [self.render(v) for v in value]
        if isinstance(value, dict):
            return {k: self.render(v) for k, v in value.items()}
        return value

    def condition(self, expression: Any) -> bool:
        """A `when:` (a string or a list of them, all true); Unresolved when the node decides."""
        if isinstance(expression, list):
            return all(self.condition(e) for e in expression)
        if isinstance(expression, bool):
            return expression
        return bool(self._template("{{ " + str(expression) + " }}"))

    def _template(self, text: str) -> Any:
        try:
            template = _compiled(text)
            context = template.new_context(self, shared=True)  # lookups come back here lazily
            value = native_concat(template.root_render_func(context))
            for part in value if isinstance(value, list) else [value]:
                if isinstance(part, jinja2.Undefined):  # native rendering hands it back as is
                    raise Unresolved(part._undefined_message)
            return value
        except Unresolved:
            raise
        except jinja2.UndefinedError as exc:
            raise Unresolved(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a filter or test given what only the node knows
            raise Unresolved(f"{text.strip()}: {exc}") from None


@functools.lru_cache(maxsize=4096)
def _compiled(text: str) -> jinja2.Template:
    """A template compiled once (every kind of node renders the same role texts)."""
    with warnings.catch_warnings():  # a role's regex "\\d" in a Jinja string: Ansible's too
        warnings.simplefilter("ignore", DeprecationWarning)
        return environment().from_string(text)


@jinja2.pass_context
def _lookup(context: jinja2.runtime.Context, name: str, *terms: Any, **kwargs: Any) -> Any:
    """first_found (how the roles pick an OS's vars file) as Ansible resolves it in a role;
    any other lookup runs on the controller at play time: Unresolved."""
    if name.rsplit(".", 1)[-1] != "first_found" or not terms:
        raise Unresolved(f"lookup {name!r} runs on the controller at play time")
    spec = terms[0]
    files = spec.get("files", []) if isinstance(spec, dict) else list(spec)
    role = Path(str(context.resolve("role_path")))
    paths = spec.get("paths") if isinstance(spec, dict) and spec.get("paths") else None
    for file in files:
        for directory in [role / p for p in paths] if paths else [role / "vars", role]:
            if (directory / file).is_file():
                return str(directory / file)
    raise Unresolved(f"first_found: none of {files} in {role.name}")


def _shim_filters(name: str) -> dict[str, Any]:
    """The filters a playbooks/filter_plugins shim gives Ansible (the same kiln functions)."""
    path = PLAYBOOKS_DIR / "filter_plugins" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"kiln_mirror_shim_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


@functools.cache
def environment() -> jinja2.Environment:
    from ansible.plugins.filter.core import FilterModule as CoreFilters
    from ansible.plugins.filter.mathstuff import FilterModule as MathFilters
    from ansible.plugins.test.core import TestModule as CoreTests

    env = NativeEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    # Jinja's own filters and tests stay (Ansible 2.19 replaces `default` with one that needs
    # its templating engine); Ansible's add what Jinja lacks (bool, regex_replace, combine...).
    for name, function in {**CoreFilters().filters(), **MathFilters().filters()}.items():
        env.filters.setdefault(name, function)
    for shim in sorted(p.stem for p in (PLAYBOOKS_DIR / "filter_plugins").glob("kiln*.py")):
        env.filters.update(_shim_filters(shim))
    for name, function in CoreTests().tests().items():
        env.tests.setdefault(name, function)
    return env


_GLOBALS: dict[str, Any] = {
    "lookup": _lookup, "query": _lookup, "q": _lookup, "omit": OMIT,
    "ansible_managed": "Ansible managed",  # what a template's header renders (no fetch in it)
}  # fmt: skip
