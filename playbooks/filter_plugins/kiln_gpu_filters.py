"""Ansible filter shim: the nvidia and nccl stages' decisions, tested in kiln.gpu."""

from kiln.gpu.filters import FILTERS


class FilterModule:
    def filters(self):
        return dict(FILTERS)
