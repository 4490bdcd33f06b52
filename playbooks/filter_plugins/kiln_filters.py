"""Ansible filter shim: the roles use kiln's own tested filters (hostlist, expand_hostlist)."""

from kiln.render import FILTERS


class FilterModule:
    def filters(self):
        return dict(FILTERS)
