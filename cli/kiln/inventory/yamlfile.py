"""YAML loading that remembers the line of every mapping key.

Uses PyYAML's C parser when present (a 12,500-host inventory loads in well under a second,
where `ansible-inventory` takes about 18 s) and Ansible's YAML 1.1 typing, so `yes` is a
boolean here as it is in Ansible. `!vault` values stay opaque; `!unsafe` values are strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LocatedDict(dict):
    """A dict that knows the line of each key (1-based) and of itself."""

    __slots__ = ("line", "key_lines", "duplicates")

    def __init__(self) -> None:
        super().__init__()
        self.line = 0
        self.key_lines: dict = {}
        self.duplicates: list[tuple[str, int]] = []


@dataclass(frozen=True, slots=True)
class VaultValue:
    """An ansible-vault encrypted value. Opaque unless kiln was given a vault password: then the
    loader (kiln.inventory.sources) fills `plaintext`, for validation only; the export still
    hands Ansible the ciphertext."""

    ciphertext: str = field(repr=False)
    plaintext: str | None = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:  # never print the ciphertext either
        return "<vault-encrypted>"

    def __repr__(self) -> str:
        return "VaultValue(<vault-encrypted>)"


class Sealed:
    """A value read from a whole ansible-vault encrypted file: plain to kiln (a str, an int or
    a float like any other), secret to every record kiln writes (kiln.inventory.redact)."""

    __slots__ = ()


class SealedStr(Sealed, str):
    __slots__ = ()


class SealedInt(Sealed, int):
    __slots__ = ()


class SealedFloat(Sealed, float):
    __slots__ = ()


def seal(value: object) -> object:
    """`value` with every string and number in it sealed (mappings and lists changed in
    place). Booleans and nulls stay as they are: bool cannot be subclassed, and a yes/no is
    not searched for in text anyway."""
    if isinstance(value, Sealed | VaultValue | bool) or value is None:
        return value
    if isinstance(value, str):
        return SealedStr(value)
    if isinstance(value, int):
        return SealedInt(value)
    if isinstance(value, float):
        return SealedFloat(value)
    if isinstance(value, dict):
        for key, item in value.items():
            value[key] = seal(item)
    elif isinstance(value, list):
        value[:] = [seal(item) for item in value]
    return value


class _LineLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    pass


# Plain scalars (most of an inventory: every host's name and address) are built by their
# constructor directly, without construct_object's bookkeeping (the alias cache, the recursion
# guard), which only matters for collections and for tags kiln adds (!vault, !unsafe). The
# same constructor, so the same value: `yes` is still True, `010` still 8.
_PLAIN_TAGS = tuple(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "bool", "float", "null"))


def _construct(loader: _LineLoader, node: yaml.Node) -> object:
    if node.__class__ is yaml.ScalarNode:
        plain = _PLAIN.get(node.tag)
        if plain is not None:
            return plain(loader, node)
    return loader.construct_object(node, deep=True)


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LocatedDict:
    loader.flatten_mapping(node)
    mapping = LocatedDict()
    mapping.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = _construct(loader, key_node)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            )
        line = key_node.start_mark.line + 1
        if key in mapping:
            mapping.duplicates.append((str(key), line))
        mapping[key] = _construct(loader, value_node)
        mapping.key_lines[key] = line
    return mapping


def _construct_vault(loader: _LineLoader, node: yaml.Node) -> VaultValue:
    return VaultValue(loader.construct_scalar(node))


def _construct_unsafe(loader: _LineLoader, node: yaml.Node) -> object:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return _construct_mapping(loader, node)


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_LineLoader.add_constructor("!vault", _construct_vault)
_LineLoader.add_constructor("!unsafe", _construct_unsafe)
_PLAIN = {tag: _LineLoader.yaml_constructors[tag] for tag in _PLAIN_TAGS}
# SafeConstructor.construct_yaml_str returns the scalar's text as it is; so does this.
_PLAIN["tag:yaml.org,2002:str"] = lambda loader, node: node.value


class YamlError(Exception):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def load_yaml(text: str) -> object:
    """Parse one YAML document; raises YamlError with the line of the problem."""
    try:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else 0
        problem = error.problem or str(error)
        context = f" ({error.context})" if error.context else ""
        raise YamlError(f"malformed YAML: {problem}{context}", line) from error
    except yaml.YAMLError as error:
        raise YamlError(f"malformed YAML: {error}", 0) from error
