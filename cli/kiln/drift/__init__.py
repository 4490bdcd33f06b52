"""Drift-aware re-apply: run a stage on a node only when its desired state changed or the node
drifted from what the stage applied there.

- `probe_nodes(nodes)`: one SSH exec per node (kiln.fleet) runs node.py's probe: the recorded
  fingerprint of each stage and what drifted (files, packages, services, the Slurm daemons'
  `-V` against the declared version);
- `assess(desired, probes, ...)` (pure): per node and stage, run or skip, and why;
- `write_records(...)`: after a run, each node keeps /var/lib/kiln/applied/<stage>.json for the
  stages that succeeded there (the fingerprint and the manifest the run's results named).

The desired fingerprints come from kiln.plan.fingerprint; docs/scale.md tells the whole story.
"""

from kiln.drift.assess import ALWAYS, Assessment, Decision, assess
from kiln.drift.remote import NodeProbe, probe_nodes, write_records

__all__ = [
    "ALWAYS",
    "Assessment",
    "Decision",
    "NodeProbe",
    "assess",
    "probe_nodes",
    "write_records",
]
