"""What a provision and a burn-in of an inventory fetch, derived from the roles themselves.

    plan = mirror_plan(cluster)     # kiln.artifacts.plan: every artifact, one line each
    walk_playbook(...)              # kiln.artifacts.roles: the fetching tasks a node would run
    Scope(...)                      # kiln.artifacts.scope: a role's variables, rendered offline

`kiln mirror plan` prints it; an air-gapped site mirrors what it names (kiln.mirror: where).
"""

from __future__ import annotations

from kiln.artifacts.plan import Artifact, MirrorPlan, mirror_plan

__all__ = ["Artifact", "MirrorPlan", "mirror_plan"]
