"""Ansible filter shim: the roles use kiln's own tested filters (hostlist, expand_hostlist) and
kiln's drain-reason grammar (kiln.parsers.drain_reason): kiln_drain_reason builds a reason,
is_kiln_reason / kiln_drain_kind / kiln_drain_parts read one, kiln_node_drain reads a node's
state and reason from `scontrol show node` output; kiln_health_expectations writes a node's
health expectations (kiln.health.expect); kiln_mirrored puts a download source under
kiln_mirror.url (kiln.mirror.filters); kiln_bundle_path, kiln_image_registry and
kiln_image_pinned name a container image's bundle, registry and pinned reference
(kiln.inventory.containers_spec); kiln_identity_change says whether a node's hardware identity
changed (kiln.parsers.identity)."""

from kiln.health.expect import FILTERS as HEALTH_FILTERS
from kiln.inventory.containers_spec import FILTERS as CONTAINER_FILTERS
from kiln.mirror.filters import FILTERS as MIRROR_FILTERS
from kiln.parsers.drain_reason import FILTERS as REASON_FILTERS
from kiln.parsers.identity import FILTERS as IDENTITY_FILTERS
from kiln.render import FILTERS


class FilterModule:
    def filters(self):
        return {
            **FILTERS,
            **REASON_FILTERS,
            **HEALTH_FILTERS,
            **MIRROR_FILTERS,
            **CONTAINER_FILTERS,
            **IDENTITY_FILTERS,
        }
