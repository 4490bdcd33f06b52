"""Ansible filter shim: the Slurm version the slurm roles install and hold (kiln.profiles.slurm),
the same answer `kiln validate` checked; the sacctmgr reads and changes that keep the declared
accounts (kiln.accounting), the same list `kiln plan --live` shows; where an in-place upgrade
keeps its backups (kiln.profiles.slurm_upgrade)."""

from kiln.accounting import FILTERS as ACCOUNTING_FILTERS
from kiln.profiles.slurm import FILTERS
from kiln.profiles.slurm_upgrade import FILTERS as UPGRADE_FILTERS


class FilterModule:
    def filters(self):
        return {**FILTERS, **ACCOUNTING_FILTERS, **UPGRADE_FILTERS}
