"""Type every written kiln_* value once, where it is written (kiln.inventory.schema's types).

A bad value in group_vars/ is one finding at its line, however many hosts inherit it. What
cannot be read as its type (a templated value, a plaintext secret, an unknown key, a wrong
type) is reported here and types as None; the rules (kiln.inventory.rules) judge the values
that did read.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator

from pydantic import BaseModel, ValidationError

from kiln.inventory import accounting_spec
from kiln.inventory.findings import FindingCollector, Origin, suggest
from kiln.inventory.raw import Located, RawInventory
from kiln.inventory.schema import ANSIBLE_SECRETS, KEYS, SAFE_TOKEN, PartitionSpec
from kiln.inventory.yamlfile import VaultValue

TYPE_NAMES = {
    int: "a whole number",
    bool: "a boolean (true or false)",
    str: "a string",
    list: "a list",
    float: "a number",
}
# pydantic reports one error per member of an `int | str` union; the first tells enough.
_UNION_MEMBERS = (
    "int",
    "str",
    "function-after[_batch_size(), str]",
    accounting_spec.SWITCH,
    accounting_spec.DECLARED,
)
_WRONG_TYPE = {
    "int_type": int,
    "bool_type": bool,
    "float_type": float,
    "string_type": str,
    "list_type": list,
}

# The typed value of each written kiln_* value, keyed by id() of its Located.
TypedValues = dict[int, object]


def read_values(raw: RawInventory, out: FindingCollector) -> TypedValues:
    """Every kiln_* value the inventory writes, typed; None where it does not read."""
    reader = _Reader(out)
    for group in raw.groups.values():
        for located_vars in (group.file_vars, group.plugin_vars):
            for key, located in located_vars.items():
                reader.read(key, located, group_name=group.name)
    for host in raw.hosts.values():
        for located_vars in (host.file_vars, host.plugin_vars):
            for key, located in located_vars.items():
                reader.read(key, located, group_name=None)
    return reader.typed


def type_name(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return "null" if value is None else type(value).__name__


def unsafe_value(out: FindingCollector, key: str, value: str, origin: Origin) -> None:
    out.error(
        f"{key} value {value!r} holds characters that are unsafe in a command "
        "(spaces, quotes or shell metacharacters)",
        origin=origin,
        key=key,
        hint="use letters, digits and . _ - : / @ % + , = only",
    )


def _walk_strings(value: object, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk_strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk_strings(item, f"{path}[{index}]")


class _Reader:
    def __init__(self, out: FindingCollector) -> None:
        self.out = out
        self.typed: TypedValues = {}

    def read(self, key: str, located: Located, group_name: str | None) -> None:
        origin, value = located.origin, located.value
        for path, text in _walk_strings(value, key):
            if "{{" in text or "{%" in text:
                self.out.error(
                    f"{path} holds a Jinja2 expression ({text.strip()[:60]!r}); Ansible would "
                    "template it on the controller",
                    origin=origin,
                    key=key,
                    hint="write the literal value; kiln refuses templated inventory values",
                )
                self.typed[id(located)] = None
                return
        if key in ANSIBLE_SECRETS or (key in KEYS and KEYS[key].kind == "secret"):
            if not isinstance(value, VaultValue):
                self.out.error(
                    f"{key} is a plaintext secret in the inventory",
                    origin=origin,
                    key=key,
                    hint="encrypt it: ansible-vault encrypt_string --name "
                    + key
                    + " (and rotate it: it has been exposed in the repository)",
                )
            elif key == "kiln_munge_key" and value.plaintext is not None:
                problem = munge_key_problem(value.plaintext)
                if problem:
                    self.out.error(
                        f"kiln_munge_key (decrypted) {problem}",
                        origin=origin,
                        key=key,
                        hint="make one: head -c 1024 /dev/urandom | base64 -w0, then "
                        "ansible-vault encrypt_string --name kiln_munge_key",
                    )
            return
        if not key.startswith("kiln_"):
            return
        spec = KEYS.get(key)
        if spec is None:
            self.out.error(
                f"unknown key {key}",
                origin=origin,
                key=key,
                hint=suggest(key, KEYS) or "see README.md for the kiln_* keys",
            )
            return
        if spec.scope == "cluster" and group_name != "all":
            where = f"group '{group_name}'" if group_name else "a host"
            self.out.error(
                f"{key} is cluster-wide but is set on {where}",
                origin=origin,
                key=key,
                hint="set it once in group_vars/all",
            )
        self.typed[id(located)] = self._typed(key, value, origin)

    def _typed(self, key: str, value: object, origin: Origin) -> object:
        spec = KEYS[key]
        if spec.kind in ("str", "int"):
            expected = str if spec.kind == "str" else int
            if isinstance(value, expected) and not isinstance(value, bool):
                if spec.reaches_command and isinstance(value, str) and not SAFE_TOKEN.match(value):
                    unsafe_value(self.out, key, value, origin)
                    return None
                return value
            self._wrong_type(key, value, expected, origin)
            return None
        if spec.kind == "list[str]":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                self.out.error(
                    f"{key} must be a list of names, got {type_name(value)}",
                    origin=origin,
                    key=key,
                    hint=f"for example {key}: [mlx5_0, mlx5_1]",
                )
                return None
            for item in value:
                if not SAFE_TOKEN.match(item):
                    unsafe_value(self.out, key, item, origin)
                    return None
            return list(value)
        if key == "kiln_partitions":
            if not isinstance(value, list):
                self.out.error(
                    f"{key} must be a list of partitions, got {type_name(value)}",
                    origin=origin,
                    key=key,
                    hint="for example kiln_partitions: [{name: gpu, groups: [kiln_compute]}]",
                )
                return None
            parsed = [
                self._model(PartitionSpec, key, item, origin, (i,)) for i, item in enumerate(value)
            ]
            return None if any(p is None for p in parsed) else parsed
        return self._model(spec.model, key, value, origin, ())

    def _model(self, model: type[BaseModel], key, value, origin, loc_prefix) -> BaseModel | None:
        if not isinstance(value, dict):
            self.out.error(
                f"{key} must be a mapping, got {type_name(value)}",
                origin=origin.nested(value, loc_prefix),
                key=key,
            )
            return None
        try:
            return model.model_validate(value)
        except ValidationError as error:
            for problem in error.errors():
                self._model_problem(model, key, value, origin, loc_prefix, problem)
            return None

    def _model_problem(self, model, key, value, origin, loc_prefix, problem) -> None:
        loc = tuple(p for p in problem["loc"] if p not in _UNION_MEMBERS)
        where = origin.nested(value, loc_prefix + loc)
        dotted = ".".join(str(p) for p in (key, *loc_prefix, *loc))
        kind, given = problem["type"], problem.get("input")
        if kind == "extra_forbidden":
            name = str(loc[-1])
            self.out.error(
                f"unknown key {dotted}",
                origin=where,
                key=key,
                hint=suggest(name, model.model_fields)
                or f"known keys: {', '.join(model.model_fields)}",
            )
        elif kind == "missing":
            self.out.error(f"{dotted} is required", origin=where, key=key)
        elif kind in _WRONG_TYPE and isinstance(given, str):
            self._wrong_type(dotted, given, _WRONG_TYPE[kind], where, key=key)
        else:
            self.out.error(f"{dotted}: {problem['msg']} (got {given!r})", origin=where, key=key)

    def _wrong_type(self, dotted, value, expected, origin, key=None) -> None:
        hint = None
        if isinstance(value, str) and expected in (int, float, bool):
            bare = value.strip().lower()
            if expected is bool and bare in ("true", "false", "yes", "no"):
                hint = "write true or false without quotes (True/False in INI files)"
            elif expected is not bool and bare.lstrip("-").replace(".", "", 1).isdigit():
                hint = f"write {value.strip()} without quotes"
        self.out.error(
            f"{dotted} is {type_name(value)} ({value!r}) where {TYPE_NAMES[expected]} belongs",
            origin=origin,
            key=key or dotted.split(".")[0],
            hint=hint,
        )


MUNGE_KEY_BYTES = (32, 1024)


def munge_key_problem(text: str) -> str | None:
    """Why `text` is not a munge key (base64 of 32 to 1024 bytes); None when it is one."""
    try:
        key = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return "is not base64"
    low, high = MUNGE_KEY_BYTES
    if not low <= len(key) <= high:
        return f"decodes to {len(key)} bytes; a munge key is {low} to {high} bytes"
    return None
