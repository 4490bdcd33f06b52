"""Judge the resolved inventory and build the Cluster model, collecting every finding.

Checks that concern a value are made once where the value is written (a bad group var is
one finding, listing the hosts it reaches); checks that concern a host are made per host.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ValidationError

from kiln.inventory.findings import FindingCollector, Origin
from kiln.inventory.model import Cluster, Node, Partition
from kiln.inventory.resolve import ResolvedHost
from kiln.inventory.schema import (
    ANSIBLE_SECRETS,
    KEYS,
    SAFE_TOKEN,
    BurninSpec,
    IbSpec,
    PartitionSpec,
    PowerSpec,
    RolloutSpec,
    SlurmSpec,
    VersionsSpec,
)
from kiln.inventory.sources import IGNORED_EXTENSIONS, Located, RawInventory
from kiln.inventory.yamlfile import LocatedDict, VaultValue
from kiln.parsers import ParseError
from kiln.parsers.ibnetdiscover import parse_ibnetdiscover
from kiln.profiles import HardwareProfile, Versions, load_compat, load_profiles

CONTROLLERS, COMPUTE = "kiln_controllers", "kiln_compute"
RFC1123_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
DNS_NAME = re.compile(
    r"^(?=.{1,253}$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?$"
)
CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
TYPE_NAMES = {
    int: "a whole number",
    bool: "a boolean (true or false)",
    str: "a string",
    list: "a list",
    float: "a number",
}


def suggest(word: str, candidates) -> str | None:
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{matches[0]}'?" if matches else None


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return "null" if value is None else type(value).__name__


def _walk_strings(value: object, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk_strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk_strings(item, f"{path}[{index}]")


def _nested_origin(value: object, loc: tuple, origin: Origin) -> Origin:
    """The line of a nested key inside a structured value, for pydantic errors."""
    line = origin.line
    for part in loc:
        if isinstance(value, LocatedDict) and part in value:
            line = value.key_lines.get(part, line)
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and part < len(value):
            item = value[part]
            if isinstance(item, LocatedDict):
                line = item.line
            value = item
        else:
            break
    return Origin(origin.file, line) if line else origin


class ClusterBuilder:
    def __init__(
        self, raw: RawInventory, hosts: dict[str, ResolvedHost], collector: FindingCollector
    ) -> None:
        self.raw = raw
        self.hosts = hosts
        self.out = collector
        self.profiles = load_profiles()
        # Parsed value of each written kiln_* value, keyed by id(Located); None when invalid.
        self._parsed: dict[int, object] = {}

    # -- values, once where they are written ---------------------------------------------

    def check_written_values(self) -> None:
        for group in self.raw.groups.values():
            for located_vars in (group.file_vars, group.plugin_vars):
                for key, located in located_vars.items():
                    self._check_value(key, located, group_name=group.name)
        for host in self.raw.hosts.values():
            for located_vars in (host.file_vars, host.plugin_vars):
                for key, located in located_vars.items():
                    self._check_value(key, located, group_name=None)

    def _check_value(self, key: str, located: Located, group_name: str | None) -> None:
        origin, value = located.origin, located.value
        for path, text in _walk_strings(value, key):
            if "{{" in text or "{%" in text:
                self.out.error(
                    f"{path} holds a Jinja2 expression ({text.strip()[:60]!r}); Ansible would "
                    "template it on the controller",
                    origin=origin,
                    key=key,
                    hint="write the literal value; kiln refuses templated inventory values",
                )
                self._parsed[id(located)] = None
                return
        if key in ANSIBLE_SECRETS or (key in KEYS and KEYS[key].kind == "secret"):
            if not isinstance(value, VaultValue):
                self.out.error(
                    f"{key} is a plaintext secret in the inventory",
                    origin=origin,
                    key=key,
                    hint="encrypt it: ansible-vault encrypt_string --name "
                    + key
                    + " (and rotate it: it has been exposed in the repository)",
                )
            return
        if not key.startswith("kiln_"):
            return
        spec = KEYS.get(key)
        if spec is None:
            self.out.error(
                f"unknown key {key}",
                origin=origin,
                key=key,
                hint=suggest(key, KEYS) or "see README.md for the kiln_* keys",
            )
            return
        if spec.scope == "cluster" and group_name != "all":
            where = f"group '{group_name}'" if group_name else "a host"
            self.out.error(
                f"{key} is cluster-wide but is set on {where}",
                origin=origin,
                key=key,
                hint="set it once in group_vars/all",
            )
        self._parsed[id(located)] = self._parse(key, value, origin)

    def _parse(self, key: str, value: object, origin: Origin) -> object:
        spec = KEYS[key]
        if spec.kind in ("str", "int"):
            expected = str if spec.kind == "str" else int
            if isinstance(value, expected) and not isinstance(value, bool):
                if spec.reaches_command and isinstance(value, str) and not SAFE_TOKEN.match(value):
                    self._unsafe(key, value, origin)
                    return None
                return value
            self._wrong_type(key, value, expected, origin)
            return None
        if spec.kind == "list[str]":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                self.out.error(
                    f"{key} must be a list of names, got {_type_name(value)}",
                    origin=origin,
                    key=key,
                    hint=f"for example {key}: [mlx5_0, mlx5_1]",
                )
                return None
            for item in value:
                if not SAFE_TOKEN.match(item):
                    self._unsafe(key, item, origin)
                    return None
            return list(value)
        if key == "kiln_partitions":
            if not isinstance(value, list):
                self.out.error(
                    f"{key} must be a list of partitions, got {_type_name(value)}",
                    origin=origin,
                    key=key,
                    hint="for example kiln_partitions: [{name: gpu, groups: [kiln_compute]}]",
                )
                return None
            parsed = [
                self._model(PartitionSpec, key, item, origin, (i,)) for i, item in enumerate(value)
            ]
            return None if any(p is None for p in parsed) else parsed
        return self._model(spec.model, key, value, origin, ())

    def _model(self, model: type[BaseModel], key, value, origin, loc_prefix) -> BaseModel | None:
        if not isinstance(value, dict):
            self.out.error(
                f"{key} must be a mapping, got {_type_name(value)}",
                origin=_nested_origin(value, loc_prefix, origin),
                key=key,
            )
            return None
        try:
            return model.model_validate(value)
        except ValidationError as error:
            for problem in error.errors():
                self._model_problem(model, key, value, origin, loc_prefix, problem)
            return None

    def _model_problem(self, model, key, value, origin, loc_prefix, problem) -> None:
        loc = tuple(problem["loc"])
        # `int | str` unions report one error per member; the first tells enough.
        loc = tuple(p for p in loc if p not in ("int", "str", "function-after[_batch_size(), str]"))
        where = (
            _nested_origin(value, loc_prefix + loc, origin)
            if loc_prefix
            else _nested_origin(value, loc, origin)
        )
        dotted = ".".join(str(p) for p in (key, *loc_prefix, *loc))
        kind, given = problem["type"], problem.get("input")
        if kind == "extra_forbidden":
            name = str(loc[-1])
            self.out.error(
                f"unknown key {dotted}",
                origin=where,
                key=key,
                hint=suggest(name, model.model_fields)
                or f"known keys: {', '.join(model.model_fields)}",
            )
        elif kind == "missing":
            self.out.error(f"{dotted} is required", origin=where, key=key)
        elif kind in (
            "int_type",
            "bool_type",
            "float_type",
            "string_type",
            "list_type",
        ) and isinstance(given, str):
            wanted = {
                "int_type": int,
                "bool_type": bool,
                "float_type": float,
                "list_type": list,
            }.get(kind, str)
            self._wrong_type(dotted, given, wanted, where, key=key)
        else:
            self.out.error(f"{dotted}: {problem['msg']} (got {given!r})", origin=where, key=key)

    def _wrong_type(self, dotted, value, expected, origin, key=None) -> None:
        hint = None
        if isinstance(value, str) and expected in (int, float, bool):
            bare = value.strip().lower()
            if expected is bool and bare in ("true", "false", "yes", "no"):
                hint = "write true or false without quotes (True/False in INI files)"
            elif expected is not bool and bare.lstrip("-").replace(".", "", 1).isdigit():
                hint = f"write {value.strip()} without quotes"
        self.out.error(
            f"{dotted} is {_type_name(value)} ({value!r}) where {TYPE_NAMES[expected]} belongs",
            origin=origin,
            key=key or dotted.split(".")[0],
            hint=hint,
        )

    def _unsafe(self, key: str, value: str, origin: Origin) -> None:
        self.out.error(
            f"{key} value {value!r} holds characters that are unsafe in a command "
            "(spaces, quotes or shell metacharacters)",
            origin=origin,
            key=key,
            hint="use letters, digits and . _ - : / @ % + , = only",
        )

    def value(self, host: ResolvedHost, key: str, default: object = None) -> object:
        located = host.vars.get(key)
        if located is None:
            return default
        return self._parsed.get(id(located), default)

    def origin_of(self, host: ResolvedHost, key: str) -> Origin | None:
        located = host.vars.get(key)
        return located.origin if located else None

    def declared_at(self, name: str) -> Origin | None:
        declarations = self.raw.hosts[name].declarations
        return declarations[0] if declarations else None

    # -- hosts -------------------------------------------------------------------------------

    def build_nodes(self) -> list[Node]:
        nodes = []
        for name, host in self.hosts.items():
            node = self._build_node(name, host)
            if node is not None:
                nodes.append(node)
        self._check_unique_addresses()
        return nodes

    def _build_node(self, name: str, host: ResolvedHost) -> Node | None:
        out, at = self.out, self.declared_at(name)
        groups = set(host.groups)
        is_controller, is_compute = CONTROLLERS in groups, COMPUTE in groups
        ok = True
        if not RFC1123_LABEL.match(name):
            hint = (
                "use the short host name; put the FQDN in ansible_host"
                if "." in name
                else "use lowercase letters, digits and '-' (at most 63), not starting or "
                "ending with '-'"
            )
            out.error(
                f"host name '{name}' is not a valid RFC 1123 label", origin=at, key=name, hint=hint
            )
            ok = False
        raw_host = self.raw.hosts[name]
        distinct = {str(a.value) for a in raw_host.addresses}
        if len(distinct) > 1:
            out.error(
                f"host '{name}' is declared more than once with different addresses "
                f"({', '.join(sorted(distinct))})",
                origin=raw_host.addresses[-1].origin,
                key="ansible_host",
                hint="declare the host once, or give it one address",
            )
        address = host.vars.get("ansible_host")
        address_value = str(address.value) if address is not None else name
        if not _valid_address(address_value):
            out.error(
                f"ansible_host {address_value!r} of '{name}' is neither an IP address "
                "nor a DNS name",
                origin=address.origin if address else at,
                key="ansible_host",
            )
            ok = False
        if not (is_controller or is_compute):
            out.warning(
                f"host '{name}' is in neither {CONTROLLERS} nor {COMPUTE}; kiln leaves it alone",
                origin=at,
                key=name,
            )

        profile = self._profile_for(name, host, is_compute)
        if profile is None:
            return None
        gpu_count = self.value(host, "kiln_gpu_count", profile.gpu_count_default)
        if gpu_count is None:
            return None
        if not profile.gpu_count_min <= gpu_count <= profile.gpu_count_max:
            out.error(
                f"kiln_gpu_count {gpu_count} is outside {profile.id}'s range "
                f"{profile.gpu_count_min}..{profile.gpu_count_max}",
                origin=self.origin_of(host, "kiln_gpu_count") or at,
                key="kiln_gpu_count",
                host=name,
                hint=f"{profile.name} systems carry {profile.gpu_count_default} GPUs",
            )
            ok = False
        power = self.value(host, "kiln_power", PowerSpec())
        if power is None:
            ok = False
        elif power.power_limit_w is not None and profile.power_limit_min_w is not None:
            low, high = profile.power_limit_min_w, profile.power_limit_max_w
            if not low <= power.power_limit_w <= high:
                out.error(
                    f"kiln_power.power_limit_w {power.power_limit_w} W is outside "
                    f"{profile.id}'s range {low}..{high} W",
                    origin=self.origin_of(host, "kiln_power"),
                    key="kiln_power",
                    host=name,
                    hint=f"pick a limit between {low} and {high} W",
                )
                ok = False
        hcas = self.value(host, "kiln_ib_hcas", [])
        if hcas and len(set(hcas)) != len(hcas):
            out.error(
                f"kiln_ib_hcas lists an HCA twice: {hcas}",
                key="kiln_ib_hcas",
                origin=self.origin_of(host, "kiln_ib_hcas"),
                host=name,
            )
            ok = False
        shape = profile.node_shape
        fields = {
            "sockets": self.value(host, "kiln_sockets", shape.sockets),
            "cores_per_socket": self.value(host, "kiln_cores_per_socket", shape.cores_per_socket),
            "threads_per_core": self.value(host, "kiln_threads_per_core", shape.threads_per_core),
            "real_memory_mb": self.value(host, "kiln_real_memory_mb", shape.real_memory_mb),
        }
        for field, number in fields.items():
            if number is not None and number < 1:
                out.error(
                    f"kiln_{field} must be at least 1, got {number}",
                    host=name,
                    origin=self.origin_of(host, f"kiln_{field}"),
                    key=f"kiln_{field}",
                )
                ok = False
        rack = self.value(host, "kiln_rack", "unracked")
        leaf = self.value(host, "kiln_leaf_switch", f"leaf-{rack}")
        if not ok or None in (rack, leaf, hcas, *fields.values()):
            return None
        return Node(
            name=name,
            address=address_value,
            groups=tuple(host.groups),
            is_controller=is_controller,
            is_compute=is_compute,
            rack=rack,
            leaf_switch=leaf,
            gpu_model=profile.id,
            gpu_count=gpu_count,
            ib_hcas=tuple(hcas),
            bmc_address=self.value(host, "kiln_bmc_address"),
            power=power,
            **fields,
            hostvars={k: v.value for k, v in host.vars.items()},
        )

    def _profile_for(self, name, host, is_compute) -> HardwareProfile | None:
        model = self.value(host, "kiln_gpu_model")
        origin = self.origin_of(host, "kiln_gpu_model")
        if origin is None:
            if is_compute:
                self.out.error(
                    f"compute node '{name}' has no kiln_gpu_model",
                    origin=self.declared_at(name),
                    key="kiln_gpu_model",
                    host=name,
                    hint="set kiln_gpu_model (a profile id such as h100-sxm, or none) "
                    "for the group in group_vars/",
                )
                return None
            model = "none"
        if model is None:
            return None
        profile = self.profiles.get(model)
        if profile is None:
            self.out.error(
                f"unknown GPU model '{model}'",
                origin=origin,
                key="kiln_gpu_model",
                host=name,
                hint=suggest(model, self.profiles) or f"known models: {', '.join(self.profiles)}",
            )
        return profile

    def _check_unique_addresses(self) -> None:
        # Over every host, not only those that built into a Node: a host with another
        # mistake (an unknown GPU model, say) still must not share its address.
        by_address: dict[str, list[str]] = defaultdict(list)
        by_bmc: dict[str, list[str]] = defaultdict(list)
        for name, host in self.hosts.items():
            address = host.vars.get("ansible_host")
            by_address[str(address.value) if address is not None else name].append(name)
            bmc = self.value(host, "kiln_bmc_address")
            if bmc:
                by_bmc[bmc].append(name)
        for address, names in by_address.items():
            if len(names) > 1:
                self.out.error(
                    f"hosts {', '.join(names)} share the address {address}",
                    origin=self.origin_of(self.hosts[names[1]], "ansible_host")
                    or self.declared_at(names[1]),
                    key="ansible_host",
                    hint="every host needs its own ansible_host",
                )
        for address, names in by_bmc.items():
            if len(names) > 1:
                self.out.error(
                    f"hosts {', '.join(names)} share the BMC address {address}",
                    origin=self.origin_of(self.hosts[names[1]], "kiln_bmc_address"),
                    key="kiln_bmc_address",
                    hint="every node has its own BMC",
                )
            if address in by_address:
                self.out.error(
                    f"BMC address {address} of {names[0]} is also the address of "
                    f"{by_address[address][0]}",
                    origin=self.origin_of(self.hosts[names[0]], "kiln_bmc_address"),
                    key="kiln_bmc_address",
                    hint="the BMC sits on the management network",
                )

    # -- the cluster -------------------------------------------------------------------------

    def cluster_value(self, key: str, default: object) -> tuple[object, Origin | None]:
        located = self.raw.groups["all"].plugin_vars.get(key) or self.raw.groups[
            "all"
        ].file_vars.get(key)
        if located is None:
            return default, None
        return self._parsed.get(id(located)), located.origin

    def build(self) -> Cluster | None:
        self.check_written_values()
        nodes = self.build_nodes()
        hosts_file = Origin(self.raw.sources[0]) if self.raw.sources else None
        membership = self._group_members()
        if not membership.get(CONTROLLERS):
            self.out.error(
                f"no controller: group {CONTROLLERS} has no hosts",
                origin=hosts_file,
                key=CONTROLLERS,
                hint=f"add the Slurm controller host to {CONTROLLERS}",
            )
        if not membership.get(COMPUTE):
            self.out.error(
                f"no compute nodes: group {COMPUTE} has no hosts",
                origin=hosts_file,
                key=COMPUTE,
                hint=f"list the GPU servers under {COMPUTE} (children groups per rack are fine)",
            )
        name, name_origin = self.cluster_value("kiln_cluster_name", "kiln")
        if name is not None and not CLUSTER_NAME.match(name):
            self.out.error(
                f"kiln_cluster_name {name!r} is not a valid Slurm ClusterName",
                origin=name_origin,
                key="kiln_cluster_name",
                hint="lowercase letters, digits, '-' and '_', at most 40, starting with a letter",
            )
        versions = self._versions(nodes)
        partitions = self._partitions(membership)
        burnin, _ = self.cluster_value("kiln_burnin", BurninSpec())
        rollout, _ = self.cluster_value("kiln_rollout", RolloutSpec())
        slurm, slurm_origin = self.cluster_value("kiln_slurm", SlurmSpec())
        ib, ib_origin = self.cluster_value("kiln_ib", IbSpec())
        if ib is not None and ib_origin is not None:
            self._opensm_hosts(ib, ib_origin)
        if slurm is not None and slurm_origin is not None and slurm.topology == "fabric":
            self._fabric_capture(slurm, slurm_origin, membership.get(COMPUTE, []))
        if self.out.has_errors or None in (name, versions, partitions, burnin, rollout, slurm, ib):
            return None
        return Cluster(
            name=name,
            inventory_dir=self.raw.root,
            nodes=tuple(nodes),
            groups={g: tuple(h) for g, h in membership.items()},
            versions=versions,
            partitions=tuple(partitions),
            burnin=burnin,
            rollout=rollout,
            slurm=slurm,
            ib=ib,
        )

    def _written(self, key: str) -> Located | None:
        """Where group_vars/all (or an inventory file's all:vars) sets a cluster-wide key."""
        group = self.raw.groups["all"]
        return group.plugin_vars.get(key) or group.file_vars.get(key)

    def _opensm_hosts(self, ib: IbSpec, origin: Origin) -> None:
        """opensm binds to the declared rails' ports: each host must exist and declare HCAs."""
        written = self._written("kiln_ib")
        where = _nested_origin(written.value, ("opensm_hosts",), origin) if written else origin
        seen: set[str] = set()
        for host in ib.opensm_hosts:
            if host in seen:
                self.out.error(
                    f"kiln_ib.opensm_hosts lists '{host}' twice", origin=where, key="kiln_ib"
                )
            seen.add(host)
            resolved = self.hosts.get(host)
            if resolved is None:
                self.out.error(
                    f"kiln_ib.opensm_hosts names '{host}', which the inventory does not have",
                    origin=where,
                    key="kiln_ib",
                    hint=suggest(host, self.hosts) or "list inventory hosts that declare HCAs",
                )
            elif not self.value(resolved, "kiln_ib_hcas", []):
                with_hcas = [n for n, h in self.hosts.items() if self.value(h, "kiln_ib_hcas", [])]
                self.out.error(
                    f"kiln_ib.opensm_hosts names '{host}', which declares no HCAs "
                    "(kiln_ib_hcas): opensm would have no port to manage",
                    origin=where,
                    key="kiln_ib",
                    hint=f"set kiln_ib_hcas for {host}, or pick a host with HCAs"
                    + (f" such as {with_hcas[0]}" if with_hcas else ""),
                )

    def _fabric_capture(self, slurm: SlurmSpec, origin: Origin, compute: list[str]) -> None:
        """topology: fabric reads a stored ibnetdiscover capture: it must exist, parse and hold
        the compute nodes (a node the capture lacks is left out of topology.conf)."""
        written = self._written("kiln_slurm")
        where = (
            _nested_origin(written.value, ("ibnetdiscover_file",), origin) if written else origin
        )
        name = slurm.ibnetdiscover_file or ""
        path = Path(name) if Path(name).is_absolute() else self.raw.root / name
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            why = getattr(error, "strerror", None) or str(error)
            self.out.error(
                f"kiln_slurm.ibnetdiscover_file {name}: cannot read {path} ({why})",
                origin=where,
                key="kiln_slurm",
                hint="store the output of `ibnetdiscover` run on a node of the fabric there "
                "(a path relative to the inventory directory)",
            )
            return
        try:
            fabric = parse_ibnetdiscover(text)
        except ParseError as error:
            self.out.error(
                f"kiln_slurm.ibnetdiscover_file {name} is not ibnetdiscover output: {error}",
                origin=Origin(path, error.line_no or 0),
                key="kiln_slurm",
                hint="store the plain output of `ibnetdiscover` (its default format)",
            )
            return
        if path.is_relative_to(self.raw.root) and not path.name.endswith(IGNORED_EXTENSIONS):
            self.out.warning(
                f"Ansible reads every file in an inventory directory as an inventory source, "
                f"{name} included",
                origin=where,
                key="kiln_slurm",
                hint="name the capture *.txt (Ansible skips those), or keep it outside",
            )
        hosts = {ca.hostname for ca in fabric.cas() if ca.hostname}
        missing = [n for n in compute if n not in hosts]
        if compute and len(missing) == len(compute):
            self.out.error(
                f"kiln_slurm.ibnetdiscover_file {name} holds none of the compute nodes "
                f"({compute[0]}, ...): it is another fabric's capture, or the CAs' node "
                "descriptions are unset",
                origin=where,
                key="kiln_slurm",
                hint="capture this cluster's fabric; rdma-ndd sets node descriptions to "
                "'<host> <hca>'",
            )
        elif missing:
            shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
            self.out.warning(
                f"the fabric capture {name} lacks {len(missing)} compute node(s): {shown}; "
                "topology.conf leaves them out, so Slurm runs no multi-node job across them",
                origin=where,
                key="kiln_slurm",
                hint="recapture after fixing their cabling or node descriptions",
            )

    def _group_members(self) -> dict[str, list[str]]:
        members: dict[str, list[str]] = defaultdict(list)
        for name, host in self.hosts.items():
            for group in host.groups:
                members[group].append(name)
            members["all"].append(name)
        return members

    def _versions(self, nodes: list[Node]) -> Versions | None:
        compat = load_compat()
        spec, origin = self.cluster_value("kiln_versions", VersionsSpec())
        if spec is None:
            return None
        chosen = compat.default_versions().model_dump()
        chosen.update({k: v for k, v in spec.model_dump().items() if v is not None})
        versions = Versions.model_validate(chosen)
        in_use = {node.gpu_model: node.profile for node in nodes if node.has_gpus}
        written = self.raw.groups["all"].plugin_vars.get("kiln_versions") or self.raw.groups[
            "all"
        ].file_vars.get("kiln_versions")
        for problem in compat.check(versions, in_use.values()):
            where = origin
            if written is not None and origin is not None and problem.key:
                where = _nested_origin(written.value, (problem.key,), origin)
            self.out.add(
                problem.level,
                problem.message,
                origin=where,
                key=f"kiln_versions.{problem.key}",
                hint=problem.hint,
            )
        return versions

    def _partitions(self, membership: dict[str, list[str]]) -> list[Partition] | None:
        specs, origin = self.cluster_value("kiln_partitions", None)
        compute = membership.get(COMPUTE, [])
        compute_set = set(compute)
        if origin is None:
            return [Partition(name="batch", nodes=tuple(compute), default=True)]
        if specs is None:
            return None
        partitions, seen = [], set()
        partition_origins = self.raw.groups["all"].plugin_vars.get(
            "kiln_partitions"
        ) or self.raw.groups["all"].file_vars.get("kiln_partitions")
        raw_items = partition_origins.value if partition_origins else []
        for index, spec in enumerate(specs):
            where = _nested_origin(raw_items, (index,), origin)
            if not SAFE_TOKEN.match(spec.name):
                self._unsafe("kiln_partitions.name", spec.name, where)
            if spec.name in seen:
                self.out.error(
                    f"partition '{spec.name}' is defined twice", origin=where, key="kiln_partitions"
                )
            seen.add(spec.name)
            nodes: list[str] = []
            for group in spec.groups:
                if group not in self.raw.groups:
                    self.out.error(
                        f"partition '{spec.name}' names group '{group}', which the "
                        "inventory does not have",
                        origin=where,
                        key="kiln_partitions",
                        hint=suggest(group, self.raw.groups),
                    )
                elif not membership.get(group):
                    self.out.error(
                        f"partition '{spec.name}' names group '{group}', which has no hosts",
                        origin=where,
                        key="kiln_partitions",
                        hint="add hosts to the group or drop it from the partition",
                    )
                else:
                    nodes.extend(membership[group])
            for host in spec.nodes:
                if host not in self.hosts:
                    self.out.error(
                        f"partition '{spec.name}' names host '{host}', which the "
                        "inventory does not have",
                        origin=where,
                        key="kiln_partitions",
                        hint=suggest(host, self.hosts),
                    )
                else:
                    nodes.append(host)
            if not spec.groups and not spec.nodes:
                self.out.error(
                    f"partition '{spec.name}' holds no groups and no nodes",
                    origin=where,
                    key="kiln_partitions",
                )
            outsiders = [n for n in dict.fromkeys(nodes) if n not in compute_set]
            if outsiders:
                self.out.error(
                    f"partition '{spec.name}' holds hosts that are not compute "
                    f"nodes: {', '.join(outsiders[:5])}",
                    origin=where,
                    key="kiln_partitions",
                    hint=f"only {COMPUTE} hosts run jobs",
                )
            partitions.append(
                Partition(
                    name=spec.name,
                    nodes=tuple(dict.fromkeys(nodes)),
                    default=spec.default,
                    max_time=spec.max_time,
                )
            )
        defaults = [p.name for p in partitions if p.default]
        if len(defaults) > 1:
            self.out.error(
                f"more than one default partition: {', '.join(defaults)}",
                origin=origin,
                key="kiln_partitions",
                hint="mark one default: true",
            )
        return partitions


def _valid_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return bool(DNS_NAME.match(text))
