"""Ansible filter shim: the Slurm version the slurm roles install and hold (kiln.profiles.slurm),
the same answer `kiln validate` checked."""

from kiln.profiles.slurm import FILTERS


class FilterModule:
    def filters(self):
        return dict(FILTERS)
