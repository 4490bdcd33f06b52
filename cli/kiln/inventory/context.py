"""What the rules and the builder read: the inventory as resolved, its values typed.

read_context(path, out) reads the files (kiln.inventory.sources), applies Ansible's
precedence (kiln.inventory.resolve) and types every written kiln_* value
(kiln.inventory.values); InventoryContext answers the questions every rule asks (a host's
value and where it is written, its hardware profile, the group members, the cluster-wide
settings) the same way for the rules and for the builder.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from kiln.inventory.capture import FabricCapture, read_capture
from kiln.inventory.findings import FindingCollector, Origin
from kiln.inventory.raw import Located, RawInventory
from kiln.inventory.resolve import ResolvedHost, resolve_hosts
from kiln.inventory.schema import PartitionSpec, SlurmSpec, VersionsSpec
from kiln.inventory.sources import read_inventory
from kiln.inventory.values import TypedValues, read_values
from kiln.inventory.vault import VaultConfig
from kiln.profiles import HardwareProfile, Versions, load_compat, load_profiles

CONTROLLERS, COMPUTE = "kiln_controllers", "kiln_compute"


def read_context(
    path: Path,
    out: FindingCollector,
    vault: VaultConfig | None = None,
    recorded: RecordedSlurm | None = None,
) -> InventoryContext | None:
    """The inventory at `path` ready to judge; None when it cannot be read at all."""
    raw = read_inventory(path, out, vault)
    if raw is None:
        return None
    hosts = resolve_hosts(raw, out)
    return InventoryContext(raw, hosts, read_values(raw, out), recorded)


@dataclass(frozen=True)
class RecordedSlurm:
    """The Slurm daemons' versions a preflight run read on the hosts (its facts), for the rules
    that judge a declared version against what the nodes run (an upgrade beyond the window)."""

    run_id: str
    versions: dict[str, dict[str, str | None]]  # host -> daemon -> version (None: absent)


class InventoryContext:
    def __init__(
        self,
        raw: RawInventory,
        hosts: dict[str, ResolvedHost],
        typed: TypedValues,
        recorded: RecordedSlurm | None = None,
    ) -> None:
        self.raw = raw
        self.hosts = hosts
        self.typed = typed
        self.recorded_slurm = recorded
        self.profiles = load_profiles()

    # -- a host's values --------------------------------------------------------------------

    def value(self, host: ResolvedHost, key: str, default: Any = None) -> Any:
        """The host's typed value of a kiln_* key; `default` when unset, None when unreadable."""
        located = host.vars.get(key)
        if located is None:
            return default
        return self.typed.get(id(located), default)

    def origin_of(self, host: ResolvedHost, key: str) -> Origin | None:
        located = host.vars.get(key)
        return located.origin if located else None

    def declared_at(self, name: str) -> Origin | None:
        declarations = self.raw.hosts[name].declarations
        return declarations[0] if declarations else None

    def address(self, host: ResolvedHost) -> str:
        """ansible_host, else the host name, as Ansible connects."""
        located = host.vars.get("ansible_host")
        return str(located.value) if located is not None else host.name

    def profile(self, host: ResolvedHost) -> HardwareProfile | None:
        """The host's hardware profile: None when a compute node names none, or its
        kiln_gpu_model is unreadable or unknown (rules.hosts.gpu_model_is_known says which)."""
        located = host.vars.get("kiln_gpu_model")
        if located is None:
            return None if COMPUTE in host.groups else self.profiles.get("none")
        model = self.typed.get(id(located))
        return None if model is None else self.profiles.get(model)

    def gpu_count(self, host: ResolvedHost) -> int:
        """The GPUs the host declares (kiln_gpu_count, else its profile's default); 0 without a
        GPU profile, or where the count is unreadable (kiln.inventory.values reports it)."""
        profile = self.profile(host)
        if profile is None or profile.id == "none":
            return 0
        return self.value(host, "kiln_gpu_count", profile.gpu_count_default) or 0

    # -- cluster-wide values ----------------------------------------------------------------

    def written(self, key: str) -> Located | None:
        """Where group_vars/all (or an inventory file's all:vars) sets a cluster-wide key."""
        group = self.raw.groups["all"]
        return group.plugin_vars.get(key) or group.file_vars.get(key)

    def cluster_value(self, key: str, default: Any) -> tuple[Any, Origin | None]:
        """The typed value of a cluster-wide key and its origin; (`default`, None) when unset,
        None for the value when it does not read."""
        located = self.written(key)
        if located is None:
            return default, None
        return self.typed.get(id(located)), located.origin

    def written_at(self, key: str, *loc: str | int) -> Origin | None:
        """The line of a nested key (`loc`) inside a cluster-wide value; None when unset."""
        located = self.written(key)
        return located.origin.nested(located.value, loc) if located else None

    @cached_property
    def membership(self) -> dict[str, list[str]]:
        """Group -> its hosts, children included, and 'all'."""
        members: dict[str, list[str]] = defaultdict(list)
        for name, host in self.hosts.items():
            for group in host.groups:
                members[group].append(name)
            members["all"].append(name)
        return dict(members)

    @cached_property
    def hosts_by_address(self) -> dict[str, list[str]]:
        """Address (as Ansible connects) -> the hosts that use it, every host included; two
        rules ask (unique host addresses, BMCs off the host network)."""
        by_address: dict[str, list[str]] = defaultdict(list)
        for name, host in self.hosts.items():
            by_address[self.address(host)].append(name)
        return dict(by_address)

    @cached_property
    def versions(self) -> Versions | None:
        """kiln_versions over the compatibility table's default; None when it does not read."""
        spec, _ = self.cluster_value("kiln_versions", VersionsSpec())
        if spec is None:
            return None
        chosen = load_compat().default_versions().model_dump()
        chosen.update({k: v for k, v in spec.model_dump().items() if v is not None})
        return Versions.model_validate(chosen)

    @cached_property
    def partition_specs(self) -> list[PartitionSpec] | None:
        """The written kiln_partitions; None when unset or unreadable."""
        return self.cluster_value("kiln_partitions", None)[0]

    def partition_members(self, spec: PartitionSpec) -> list[str]:
        """The hosts a partition holds: its groups' hosts and its nodes that exist, once each."""
        nodes = [host for group in spec.groups for host in self.membership.get(group, [])]
        nodes.extend(host for host in spec.nodes if host in self.hosts)
        return list(dict.fromkeys(nodes))

    @cached_property
    def capture(self) -> FabricCapture | None:
        """The stored fabric capture when kiln_slurm.topology is fabric, read and parsed once."""
        slurm, _ = self.cluster_value("kiln_slurm", SlurmSpec())
        if slurm is None or slurm.topology != "fabric":
            return None
        return read_capture(slurm.ibnetdiscover_file or "", self.raw.root)
