"""Ansible filter shim: the roles use kiln's own tested filters (hostlist, expand_hostlist) and
kiln's drain-reason grammar (kiln_drain_reason, is_kiln_reason)."""

from kiln.parsers.drain_reason import FILTERS as REASON_FILTERS
from kiln.render import FILTERS


class FilterModule:
    def filters(self):
        return {**FILTERS, **REASON_FILTERS}
