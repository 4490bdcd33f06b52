"""A role's defaults rendered as Ansible templates them, kiln's filters loaded through the very
shim the playbooks use, for tests that check what a role would install."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path

import yaml
from jinja2.nativetypes import NativeEnvironment

PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"


def render_role_defaults(
    role: str, values: dict, keys: Iterable[str], shim: str = "kiln_gpu_filters.py"
) -> dict:
    """`values` with each of `keys` from the role's defaults/main.yml added, rendered in order
    (a later default may use an earlier one); a default that is not a template is kept as is."""
    spec = importlib.util.spec_from_file_location(
        Path(shim).stem, PLAYBOOKS / "filter_plugins" / shim
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    env = NativeEnvironment()
    env.filters.update(module.FilterModule().filters())
    defaults = yaml.safe_load((PLAYBOOKS / "roles" / role / "defaults" / "main.yml").read_text())
    rendered = dict(values)
    for key in keys:
        value = defaults[key]
        rendered[key] = env.from_string(value).render(rendered) if isinstance(value, str) else value
    return rendered
