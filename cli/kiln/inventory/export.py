"""Write the validated Cluster back out as a plain Ansible inventory, for one run.

Ansible then sees exactly what kiln validated: every kiln_* key with its default filled in
(a node that leaves kiln_gpu_count to its profile still declares 8 GPUs to preflight), the
group memberships already expanded, and values shared by every host written once under
`all: vars:` so a 12,500-host export stays small.
"""

from __future__ import annotations

import json
from pathlib import Path

from kiln.inventory.model import Cluster, Node
from kiln.inventory.yamlfile import VaultValue


def _json_default(value: object) -> object:
    if isinstance(value, VaultValue):
        return {"__ansible_vault": value.ciphertext}  # Ansible's JSON form of !vault
    raise TypeError(f"cannot export {type(value).__name__}")


def resolved_vars(node: Node) -> dict:
    """The host's Ansible variables with kiln's resolved hardware values in place."""
    variables = dict(node.hostvars)
    variables.update(
        {
            "ansible_host": node.address,
            "kiln_gpu_model": node.gpu_model,
            "kiln_gpu_count": node.gpu_count,
            "kiln_rack": node.rack,
            "kiln_leaf_switch": node.leaf_switch,
            "kiln_ib_hcas": list(node.ib_hcas),
            "kiln_sockets": node.sockets,
            "kiln_cores_per_socket": node.cores_per_socket,
            "kiln_threads_per_core": node.threads_per_core,
            "kiln_real_memory_mb": node.real_memory_mb,
        }
    )
    if node.bmc_address:
        variables["kiln_bmc_address"] = node.bmc_address
    if node.has_gpus and node.profile.vendor == "amd":  # the roles' default is nvidia
        variables["kiln_gpu_vendor"] = "amd"
    return variables


def _hoist(members: list[dict]) -> dict:
    """Remove and return the variables every one of `members` has with the same value."""
    if not members:
        return {}
    shared = {
        key: value
        for key, value in members[0].items()
        if all(key in other and other[key] == value for other in members[1:])
    }
    for variables in members:
        for key in shared:
            del variables[key]
    return shared


def render_inventory(cluster: Cluster, hosts: list[str] | None = None) -> str:
    """hosts.json for `hosts` (default: every node).

    JSON, not YAML: Ansible reads it through the same YAML plugin, and both sides parse it
    several times faster at 12,500 hosts.
    """
    names = hosts if hosts is not None else [node.name for node in cluster.nodes]
    chosen = set(names)
    per_host = {name: resolved_vars(cluster.node(name)) for name in names}
    written = [variables.pop("kiln_versions", None) for variables in per_host.values()]
    all_vars = _hoist(list(per_host.values()))
    # The versions as validated, defaults filled from the compatibility table: the nvidia and
    # nccl stages install exactly these. An undeclared Slurm stays unset: the slurm roles then
    # install what the nodes' distribution ships (kiln_slurm_pin), which validate checked.
    versions = cluster.versions.model_dump(exclude_none=True)
    if not any(isinstance(w, dict) and w.get("slurm") for w in written):
        versions["slurm"] = None
    all_vars["kiln_versions"] = versions
    children: dict[str, dict] = {}
    for group, members in cluster.groups.items():
        if group in ("all", "ungrouped"):
            continue
        in_run = [h for h in members if h in chosen]
        if in_run:
            children[group] = {"hosts": {h: None for h in in_run}}
    # Values shared inside the kiln groups go to the group once; identical values, so the
    # precedence between group and host vars cannot change what a host sees.
    for group in ("kiln_compute", "kiln_controllers"):
        if group in children:
            shared = _hoist([per_host[h] for h in children[group]["hosts"]])
            if shared:
                children[group]["vars"] = shared
    document = {
        "all": {
            "vars": all_vars,
            "hosts": {name: variables or None for name, variables in per_host.items()},
            "children": children,
        }
    }
    return json.dumps(document, default=_json_default, indent=1) + "\n"


def export_inventory(cluster: Cluster, directory: Path, hosts: list[str] | None = None) -> Path:
    """Write render_inventory()'s hosts.json into `directory`; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "hosts.json"
    path.write_text(render_inventory(cluster, hosts))
    return path
