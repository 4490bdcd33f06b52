"""`kiln provision` as a use case: the lock, the drift probe and the narrowing, the run, the
drift records and the state push, returned as one outcome (no printing).

    outcome = provision(cluster, ProvisionOptions(PlanOptions()), events=events)

commands/provision.py parses the options and renders the outcome; `kiln plan --live` uses the
same probe (kiln.provision.drift) to show what a provision would run.
"""

from kiln.provision.drift import Probed, probe_plan
from kiln.provision.run import ProvisionEvents, ProvisionOptions, ProvisionOutcome, provision

__all__ = [
    "Probed",
    "ProvisionEvents",
    "ProvisionOptions",
    "ProvisionOutcome",
    "probe_plan",
    "provision",
]
