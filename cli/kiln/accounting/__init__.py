"""Accounting as data: kiln_slurm.accounting (the QoS, the account tree, users and limits)
against what slurmdbd holds, as the sacctmgr commands that make one the other.

    database = parse_database(outputs)        # kiln.parsers.sacctmgr, from its `reads`
    todo = changes(spec, "sandbox", database) # [Change]: argv and a plan line each

Pure: the caller runs the reads and the commands (the slurm_dbd role through the filters
here, `kiln plan --live` through kiln.slurmctl).
"""

from __future__ import annotations

from kiln.accounting.changes import FILTERS, Change, changes

__all__ = ["FILTERS", "Change", "changes"]
