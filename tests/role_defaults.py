"""A role's defaults rendered as Ansible templates them, kiln's filters loaded through the very
shim the playbooks use, for tests that check what a role would install."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml

from kiln.artifacts.scope import environment

PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"


def render_role_defaults(role: str, values: dict, keys: Iterable[str]) -> dict:
    """`values` with each of `keys` from the role's defaults/main.yml added, rendered in order
    (a later default may use an earlier one); a default that is not a template is kept as is.
    Rendered in the environment `kiln mirror plan` renders roles with
    (kiln.artifacts.scope.environment): every shim in filter_plugins, as Ansible loads them all
    (a default may use kiln_mirrored beside the gpu or slurm filters), and Ansible's core
    filters and tests that Jinja lacks (basename, bool, regex_replace, ...; Jinja's own default,
    map, select are kept: Ansible's expect its templar)."""
    env = environment()
    defaults = yaml.safe_load((PLAYBOOKS / "roles" / role / "defaults" / "main.yml").read_text())
    rendered = dict(values)
    for key in keys:
        value = defaults[key]
        rendered[key] = env.from_string(value).render(rendered) if isinstance(value, str) else value
    return rendered
