"""What the hardware profiles and the compatibility table share: versions, YAML, the base model."""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_version(text: str) -> tuple[int, ...]:
    """'12.10' -> (12, 10). Dotted numeric versions compare correctly as tuples."""
    parts = str(text).strip().split(".")
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"not a dotted numeric version: {text!r}")
    return tuple(int(p) for p in parts)


def read_yaml(name: str) -> Any:
    """A data file next to this package (hardware.yml, compat.yml), with a safe loader."""
    text = resources.files("kiln.profiles").joinpath(name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=_Loader)  # the C loader when PyYAML has it


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def dotted(value: Any) -> str:
    value = str(value)
    parse_version(value)
    return value


# A version written in YAML as a number (12.2, 22.05) read as its dotted text, and checked.
Dotted = Annotated[str, BeforeValidator(dotted)]
