"""A role's defaults rendered as Ansible templates them, kiln's filters loaded through the very
shim the playbooks use, for tests that check what a role would install."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path

import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters
from jinja2.nativetypes import NativeEnvironment

PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"


def render_role_defaults(role: str, values: dict, keys: Iterable[str]) -> dict:
    """`values` with each of `keys` from the role's defaults/main.yml added, rendered in order
    (a later default may use an earlier one); a default that is not a template is kept as is.
    Every shim in filter_plugins is loaded, as Ansible loads them all (a default may use
    kiln_mirrored beside the gpu or slurm filters), and Ansible's core filters that Jinja lacks
    (basename, bool, regex_replace, ...; Jinja's own default, map, select are kept: Ansible's
    expect its templar)."""
    env = NativeEnvironment()
    for name, function in CoreFilters().filters().items():
        env.filters.setdefault(name, function)
    for shim in sorted((PLAYBOOKS / "filter_plugins").glob("kiln_*.py")):
        spec = importlib.util.spec_from_file_location(shim.stem, shim)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        env.filters.update(module.FilterModule().filters())
    defaults = yaml.safe_load((PLAYBOOKS / "roles" / role / "defaults" / "main.yml").read_text())
    rendered = dict(values)
    for key in keys:
        value = defaults[key]
        rendered[key] = env.from_string(value).render(rendered) if isinstance(value, str) else value
    return rendered
