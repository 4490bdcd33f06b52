"""The InfiniBand fabric as kiln judges it, computed from parsed tool output (never run here).

- `topology`: ibnetdiscover's graph -> Slurm topology.conf (leaf and upper switches, any depth)
  and where it disagrees with the racks and leaf switches the inventory declares. The graph
  comes parsed: from the capture the inventory stores (on the Cluster, parsed by validation)
  or from ibnetdiscover run live on a node (kiln.survey.fabric).
- `links`: declared HCAs against what a node reports (present, Active/LinkUp, at the rate).
- `bandwidth`: per-rail ib_write_bw results against a floor per link rate.
- `ipoib`: the IPoIB address of each rail of a node (also an Ansible filter of the role).
"""

from __future__ import annotations
