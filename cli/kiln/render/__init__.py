"""The one Jinja2 environment for generated files, shared with Ansible through filter shims.

`kiln plan` renders templates/ here; the roles template the same files with the same
filters (playbooks/filter_plugins/kiln_filters.py imports FILTERS from this module).
"""

from __future__ import annotations

from functools import cache

import jinja2

from kiln.paths import TEMPLATES_DIR
from kiln.render.hostlist import compress, expand
from kiln.render.slurm_change import slurm_conf_action

MANAGED_HEADER = "Managed by kiln from the inventory; local changes are overwritten."

FILTERS = {
    "hostlist": compress,
    "expand_hostlist": expand,
    "slurm_conf_action": slurm_conf_action,
}


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=False,  # Ansible template defaults, so both render alike
        autoescape=False,  # noqa: S701 - these are config files, not HTML
    )
    env.filters.update(FILTERS)
    return env


def render_template(name: str, context: dict) -> str:
    return environment().get_template(name).render(ansible_managed=MANAGED_HEADER, **context)
