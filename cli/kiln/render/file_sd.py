"""The Prometheus file_sd targets file of the monitoring stage, rendered from the Cluster model.

A JSON list of `{"targets": [...], "labels": {...}}` groups (Prometheus' file_sd_config format):
one group per node and exporter, so every target carries its node's name, rack and role. Node
exporter on every node kiln provisions (controllers and compute nodes), the DCGM exporter on the
compute nodes with GPUs (where the nvidia stage installs DCGM). Deterministic: the same inventory
renders the same bytes, so `kiln plan --detailed-exitcode` sees a real change only.
"""

from __future__ import annotations

import json

from kiln.inventory import Cluster, Node

TARGETS_FILE = "prometheus-targets.json"


def _role(node: Node) -> str:
    roles = (("controller", node.is_controller), ("compute", node.is_compute))
    return ",".join(name for name, held in roles if held)


def _group(cluster: Cluster, node: Node, exporter: str, port: int) -> dict:
    spec = cluster.monitoring
    host = node.address if spec.target_address == "address" else node.name
    labels = {
        **spec.labels,
        "cluster": cluster.name,
        "node": node.name,
        "rack": node.rack,
        "role": _role(node),
        "exporter": exporter,
    }
    if exporter == "dcgm":
        labels["gpu_model"] = node.gpu_model
    return {"targets": [f"{host}:{port}"], "labels": labels}


def file_sd_targets(cluster: Cluster) -> list[dict]:
    """The target groups, in inventory order: node exporter, then the DCGM exporter."""
    spec = cluster.monitoring
    managed = [node for node in cluster.nodes if node.is_controller or node.is_compute]
    groups = [_group(cluster, node, "node", spec.node_exporter_port) for node in managed]
    if spec.dcgm_exporter:
        groups += [
            _group(cluster, node, "dcgm", spec.dcgm_exporter_port)
            for node in managed
            if node.is_compute and node.has_gpus
        ]
    return groups


def render_file_sd(cluster: Cluster) -> str:
    return json.dumps(file_sd_targets(cluster), indent=2) + "\n"
