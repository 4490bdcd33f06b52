"""The template context for the cluster-wide files, computed once from the model.

Nodes with identical hardware share one NodeName line; racks map to leaf switches. The
Slurm role receives this same context as the `kiln` variable, so its output is identical.
"""

from __future__ import annotations

from kiln.inventory import Cluster, Node


def _hardware_key(node: Node) -> tuple:
    return (
        node.sockets,
        node.cores_per_socket,
        node.threads_per_core,
        node.real_memory_mb,
        node.profile.gres_type if node.has_gpus else None,
        node.gpu_count,
        node.profile.vendor,
    )


def _device_files(count: int, vendor: str = "nvidia") -> str:
    """The GPUs' device files: NVIDIA's /dev/nvidiaN; amdgpu's render nodes, numbered from 128
    (what Slurm's gpu/rsmi plugin detects, and checks these against)."""
    if vendor == "amd":
        return "/dev/dri/renderD128" if count == 1 else f"/dev/dri/renderD[128-{127 + count}]"
    return "/dev/nvidia0" if count == 1 else f"/dev/nvidia[0-{count - 1}]"


def node_groups(nodes: list[Node]) -> list[dict]:
    groups: dict[tuple, dict] = {}
    for node in nodes:
        key = _hardware_key(node)
        group = groups.get(key)
        if group is None:
            group = groups[key] = {
                "nodes": [],
                "cpus": node.cpus,
                "sockets": node.sockets,
                "cores_per_socket": node.cores_per_socket,
                "threads_per_core": node.threads_per_core,
                "real_memory_mb": node.real_memory_mb,
                "gpu_type": key[4],
                "gpu_count": node.gpu_count if key[4] else 0,
                "gpu_files": _device_files(node.gpu_count, node.profile.vendor),
                # AMD GPUs through Slurm's gpu/rsmi plugin: it detects them, and the Type and
                # File written here sanity-check what it finds (a mismatch drains the node)
                "autodetect": "rsmi" if key[4] and node.profile.vendor == "amd" else None,
            }
        group["nodes"].append(node.name)
    return list(groups.values())


def switches(nodes: list[Node]) -> list[dict]:
    leaves: dict[str, list[str]] = {}
    for node in nodes:
        leaves.setdefault(node.leaf_switch, []).append(node.name)
    return [{"name": name, "nodes": members} for name, members in leaves.items()]


def host_entries(cluster: Cluster) -> list[dict]:
    """Name and address of every controller and compute node, as /etc/hosts lists them."""
    return [
        {"name": n.name, "address": n.address}
        for n in cluster.nodes
        if n.is_controller or n.is_compute
    ]


def hosts_context(cluster: Cluster) -> dict:
    """What hosts.j2 reads: /etc/hosts needs none of the grouping cluster_context does."""
    return {"kiln": {"cluster_name": cluster.name, "hosts": host_entries(cluster)}}


def cluster_context(cluster: Cluster, fabric_switches: int | None = None) -> dict:
    """`fabric_switches`: how many switches topology.conf holds when it is rendered from the
    fabric (kiln_slurm.topology: fabric); None when it comes from the racks. TopologyPlugin is
    on whenever topology.conf has a switch: Slurm otherwise ignores it."""
    compute = cluster.compute
    leaves = switches(compute)
    plugin = bool(leaves) if fabric_switches is None else fabric_switches > 0
    declared = cluster.slurm.declared_accounting
    return {
        "kiln": {
            "cluster_name": cluster.name,
            "controllers": [{"name": n.name, "address": n.address} for n in cluster.controllers],
            "hosts": host_entries(cluster),
            "node_groups": node_groups(compute),
            "partitions": [
                {
                    "name": p.name,
                    "nodes": list(p.nodes),
                    "default": p.default,
                    "max_time": p.max_time,
                }
                for p in cluster.partitions
                if p.nodes
            ],
            "leaf_switches": leaves,
            "topology_plugin": plugin,
            "has_gpus": any(node.has_gpus for node in compute),
            "accounting": cluster.slurm.accounting_on,
            "accounting_enforce": ",".join(declared.enforce) if declared else "",
            "cgroup": cluster.slurm.cgroup,
            "imex": cluster.slurm.imex,
            "slurm_version": cluster.versions.slurm,
            "health": cluster.health.model_dump(
                include={"enabled", "interval", "node_state", "prolog"}
            ),
        }
    }
