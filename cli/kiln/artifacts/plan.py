"""`kiln mirror plan`: every artifact a provision and a burn-in of an inventory will fetch.

    plan = mirror_plan(cluster)
    plan.artifacts    # Artifact(kind="deb", name="libnccl2", version="2.25.1-1+cuda12.8", ...)
    plan.to_dict()    # the --json document

Derived, not listed: for each kind of node in the inventory (its OS release, architecture,
place in the cluster, GPUs and HCAs), the roles are walked in play order with that node's
variables and the facts its OS release implies (kiln.artifacts.roles), and every fetching task
becomes artifacts: packages (deb/rpm) with the exact version a role pins, Python wheels with
their index, files with their checksum, repositories and their keys. What only a node can say
(its running kernel, what it has installed) is kept as the artifact's `unresolved` reason, and
a task that runs only under a condition the node decides keeps that condition (`when`), so
the plan never silently drops or invents an artifact.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kiln.artifacts.roles import Fetch, walk_playbook
from kiln.inventory import Cluster, Node
from kiln.inventory.export import resolved_vars
from kiln.inventory.mirror_spec import IMAGE_REFERENCE
from kiln.mirror.archives import load_archives
from kiln.paths import PLAYBOOKS_DIR
from kiln.profiles.platforms import load_platforms

# Burn-in installs its runtime (the burnin role) as well as what site.yml provisions.
PLAYBOOKS = ("site.yml", "burnin.yml")
KERNEL = "<the node's kernel>"  # the one fact a plan cannot know before the node is up
_OS_FAMILY = {"apt": "Debian", "dnf": "RedHat"}
_DNF_VERSION = re.compile(r"^(?P<name>.+?)-(?P<version>\d+(?:\.\d+)+(?:-[^-]+)?\*?)$")
_URL = re.compile(r"https?://[^\s\]\"']+")


@dataclass(frozen=True, order=True)
class Artifact:
    """One thing a node fetches: kind (deb, rpm, wheel, image, file, repository, key), its name, the
    exact version when a role pins one ("" when the repository's current one is taken), where
    from, its checksum when a role checks one, and for which OS release and architecture."""

    kind: str
    name: str
    version: str
    platform: str  # kiln_os/kiln_arch
    source: str = ""
    suite: str = ""  # an apt repository's suite and components ("bookworm main"; "/" flat)
    checksum: str = ""
    role: str = ""
    where: str = ""  # the task's playbooks-relative file:line
    when: str = ""  # conditions only the node decides ("" always)
    unresolved: str = ""  # what only the node can say, when it decides the artifact
    recommends: bool = True  # a deb's Recommends come along (the apt task's install_recommends)


@dataclass
class MirrorPlan:
    cluster: str
    platforms: list[str] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The --json payload (kiln.console.print_json adds its kind and schema version)."""
        return {
            "cluster": self.cluster,
            "platforms": self.platforms,
            "artifacts": [asdict(a) for a in self.artifacts],
        }

    @property
    def unresolved(self) -> list[Artifact]:
        return [a for a in self.artifacts if a.unresolved]

    def lines(self) -> list[str]:
        """One line per artifact, tab-separated: kind, name, version ("-": the repository's
        current one), platform, source (an apt repository's suite and components after its
        URL), checksum ("-": none checked; a repository: the keyring its signed index is
        checked with), the task (file:line), then `when: ...`, `unresolved: ...` and
        `without recommends` (an apt task that installs none) where they apply."""
        rows = []
        for a in self.artifacts:
            notes = [f"when: {a.when}"] if a.when else []
            notes += [f"unresolved: {a.unresolved}"] if a.unresolved else []
            notes += [] if a.recommends else ["without recommends"]
            source = f"{a.source} {a.suite}" if a.suite else a.source or "-"
            cells = (a.kind, a.name, a.version or "-", a.platform, source, a.checksum or "-",
                     a.where, *notes)  # fmt: skip
            rows.append("\t".join(cells))
        return rows


def node_facts(kiln_os: str, arch: str) -> dict[str, Any]:
    """The facts a node of this OS release and architecture reports, as far as the release
    says them (kiln's platforms.yml); its kernel is KERNEL."""
    platform = load_platforms().get(kiln_os)
    if platform is None:
        raise ValueError(f"kiln_os {kiln_os!r} is not in kiln's platforms.yml")
    facts = {
        "distribution": platform.distributions[0],
        "distribution_version": platform.version,
        "distribution_major_version": platform.version.split(".")[0],
        "os_family": _OS_FAMILY[platform.family],
        "architecture": arch,
        "kernel": KERNEL,
    }
    return {"ansible_facts": facts, **{f"ansible_{k}": v for k, v in facts.items()}}


def _kind_key(node: Node, hostvars: dict[str, Any]) -> tuple:
    """Nodes alike in everything the roles branch on fetch alike: one walk per kind."""
    return (
        hostvars.get("kiln_os"), hostvars.get("kiln_arch"), node.is_controller, node.is_compute,
        node.gpu_model, node.gpu_count > 0, bool(node.ib_hcas), node.bmc_address is not None,
    )  # fmt: skip


def representatives(cluster: Cluster) -> list[tuple[Node, dict[str, Any]]]:
    """One node of each kind, with its resolved variables, in inventory order."""
    seen: dict[tuple, tuple[Node, dict[str, Any]]] = {}
    for node in cluster.nodes:
        hostvars = resolved_vars(node)
        seen.setdefault(_kind_key(node, hostvars), (node, hostvars))
    return list(seen.values())


def mirror_plan(cluster: Cluster) -> MirrorPlan:
    """Every artifact a provision and a burn-in of `cluster` fetch, sorted, without repeats."""
    defaults = load_platforms().default
    found: list[Artifact] = []
    platforms: set[str] = set()
    for node, hostvars in representatives(cluster):
        kiln_os = str(hostvars.get("kiln_os") or defaults["os"])
        arch = str(hostvars.get("kiln_arch") or defaults["arch"])
        platform = f"{kiln_os}/{arch}"
        platforms.add(platform)
        family = load_platforms().platforms[kiln_os].family
        # The sources as published: a mirror the inventory sets is where they will be served
        # from, not where a bundle fetches them (kiln.mirror.filters leaves them as they are).
        variables = {k: v for k, v in hostvars.items() if k != "kiln_mirror"}
        variables |= {"inventory_hostname": node.name, "group_names": list(node.groups)}
        groups = set(node.groups)
        for playbook in PLAYBOOKS:
            for fetch in walk_playbook(
                PLAYBOOKS_DIR / playbook, groups, variables, node_facts(kiln_os, arch)
            ):
                found.extend(artifacts_of(fetch, platform, family))
        found.extend(archive_repositories(kiln_os, arch))
    found.extend(images(cluster.mirror.images, sorted(platforms)))
    if cluster.containers.enabled:  # the containers stage pulls these onto every compute node
        found.extend(images(cluster.containers.images, sorted(platforms), "kiln_containers.images"))
    return MirrorPlan(cluster.name, sorted(platforms), _merged(found))


# Docker Hub's images are named docker.io/...; its registry API answers elsewhere.
_REGISTRY_API = {"docker.io": "registry-1.docker.io", "index.docker.io": "registry-1.docker.io"}


def images(
    references: list[str], platforms: list[str], where: str = "kiln_mirror.images"
) -> list[Artifact]:
    """Images (kiln_mirror.images, kiln_containers.images), one line per image and architecture
    of the cluster: name, tag or digest, the registry's API as its source, the digest as its
    checksum when pinned."""
    out = []
    for reference in references:
        match = IMAGE_REFERENCE.match(reference)
        if match is None:  # validate refuses it; the plan does not guess
            continue
        name = f"{match['host']}/{match['repository']}"
        host = match["host"].split(":")[0]
        # a loopback registry over plain HTTP, as Docker allows it by default
        scheme = "http" if host == "localhost" or host.startswith("127.") else "https"
        api = _REGISTRY_API.get(match["host"], match["host"])
        source = f"{scheme}://{api}/v2/{match['repository']}"
        for platform in platforms:
            out.append(Artifact("image", name, match["tag"] or match["digest"], platform,
                                source=source, checksum=match["digest"] or "",
                                where=where))  # fmt: skip
    return out


def archive_repositories(kiln_os: str, arch: str) -> list[Artifact]:
    """The distribution archive a node of this release installs its distribution packages
    from (archives.yml): one repository line per URL, suites and components."""
    archive = load_archives().get(kiln_os)
    if archive is None:
        return []
    return [
        Artifact("repository", source.url, "", f"{kiln_os}/{arch}", source=source.url,
                 suite=" ".join([suite, *source.components]), checksum=archive.keyring,
                 where="mirror/archives.yml")
        for source in archive.sources if arch in source.arches
        for suite in source.suites
    ]  # fmt: skip


def _merged(found: list[Artifact]) -> list[Artifact]:
    """One line per artifact: reached by several tasks or paths (a rolling change and a first
    install reach the same install), it keeps the first task and is needed unless every path
    to it has a condition the node decides."""
    by_identity: dict[tuple, list[Artifact]] = {}
    for a in found:
        key = (a.kind, a.name, a.version, a.platform, a.source, a.suite, a.unresolved)
        by_identity.setdefault(key, []).append(a)
    out = []
    for same in by_identity.values():
        first = min(same, key=lambda a: a.where)
        conditions = sorted({a.when for a in same})
        when = "" if "" in conditions or _complementary(conditions) else " or ".join(conditions)
        # A key one task fetches and another checks (rpm_key's fingerprint): the check kept.
        checksum = max(a.checksum for a in same)
        out.append(replace(first, when=when, checksum=checksum))
    return sorted(out)


def _complementary(conditions: list[str]) -> bool:
    """Two paths under `x` and `not x`: one of them runs."""
    return any(f"not {c}" in conditions for c in conditions)


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [n.strip() for n in value.split(",") if n.strip()]
    return [str(n) for n in value if str(n)]


def _package(spec: str, family: str) -> tuple[str, str]:
    """(name, version) of an apt `name=version` or a dnf `name-version` spec."""
    if family == "apt" and "=" in spec:
        name, _, version = spec.partition("=")
        return name, version
    match = _DNF_VERSION.match(spec) if family == "dnf" else None
    return (match["name"], match["version"]) if match else (spec, "")


_NO = {"false", "no", "0", "off"}


def artifacts_of(fetch: Fetch, platform: str, family: str) -> list[Artifact]:
    """The artifacts one fetching task names."""
    args = fetch.args
    common = {
        "platform": platform, "role": fetch.role, "where": fetch.where,
        "when": " and ".join(fetch.conditions), "unresolved": "; ".join(fetch.unresolved),
    }  # fmt: skip
    module = fetch.module
    if module in ("apt", "dnf", "yum", "package"):
        if args.get("state") == "absent" or (fetch.asked or frozenset(args)).isdisjoint(
            {"name", "deb"}
        ):
            return []  # an index refresh or a removal fetches nothing
        if "name" not in args and "deb" not in args:  # the names are the node's to say
            return [Artifact("package", "?", "", **common)]
        kind = "deb" if family == "apt" else "rpm"
        source = f"{family} repositories of {platform}"
        # apt installs Recommends unless the task says not to (Debian's default)
        without = kind == "deb" and str(args.get("install_recommends")).lower() in _NO
        out = []
        for spec in _names(args.get("name")):
            name, version = _package(spec, family)
            extra: dict[str, Any] = {"recommends": False} if without else {}
            if KERNEL in spec:
                extra["unresolved"] = f"needs {KERNEL}"
            out.append(Artifact(kind, name, version, source=source, **{**common, **extra}))
        # A deb by URL is fetched by apt; a local one was fetched by a get_url listed already.
        if args.get("deb") and "://" in str(args["deb"]):
            out.append(Artifact("deb", str(args["deb"]), "", source=str(args["deb"]), **common))
        return out
    if module == "pip":
        return _wheels(args, common)
    if module in ("get_url", "unarchive"):
        url = str(args.get("url") or args.get("src") or "")
        if module == "unarchive" and not _URL.match(url):
            return []
        checksum = str(args.get("checksum") or "")
        return [Artifact("file", url.rsplit("/", 1)[-1], "", source=url, checksum=checksum,
                         **common)]  # fmt: skip
    if module in ("apt_repository", "deb822_repository", "yum_repository"):
        text = " ".join(str(args.get(k) or "") for k in ("repo", "uris", "baseurl"))
        urls = _URL.findall(text)
        suite = _suite(args)
        keys = _URL.findall(" ".join(str(args.get(k) or "") for k in ("signed_by", "gpgkey")))
        return [Artifact("repository", u, "", source=u, suite=suite, **common) for u in urls] + [
            Artifact("key", k.rsplit("/", 1)[-1], "", source=k, **common) for k in keys
        ]
    if module == "template":  # a source list: deb822 (URIs, Suites, Components) or baseurl
        found = {}
        for fields in _source_stanzas(str(args.get("content", ""))):
            suite = " ".join(fields.get(k, "") for k in ("suites", "components")).strip()
            for url in _URL.findall(" ".join(fields.get(k, "") for k in ("uris", "baseurl"))):
                found.setdefault(url, suite)
        if not found and fetch.unresolved:  # the node's to say: kept, never dropped
            return [Artifact("repository", "?", "", **common)]
        return [Artifact("repository", u, "", source=u, suite=suite, **common)
                for u, suite in found.items()]  # fmt: skip
    if module in ("rpm_key", "apt_key"):
        key = str(args.get("key") or args.get("url") or "")
        if not _URL.match(key):
            return []
        checksum = str(args.get("fingerprint") or args.get("id") or "")
        return [Artifact("key", key.rsplit("/", 1)[-1], "", source=key, checksum=checksum,
                         **common)]  # fmt: skip
    return []


def _source_stanzas(content: str) -> list[dict[str, str]]:
    """Each repository of a source list: a deb822 stanza's fields (URIs, Suites, Components;
    stanzas are separated by blank lines) or a .repo section's baseurl, lower-cased keys."""
    stanzas: list[dict[str, str]] = [{}]
    for line in content.splitlines():
        if not line.strip() or line.lstrip().startswith("["):
            stanzas.append({})
            continue
        key, sep, value = line.partition("=" if line.lstrip().startswith("baseurl") else ":")
        if sep and not line.lstrip().startswith("#"):
            stanzas[-1][key.strip().lower()] = value.strip()
    return [fields for fields in stanzas if fields]


def _suite(args: dict[str, Any]) -> str:
    """An apt repository's suite and components: deb822_repository's arguments, or the
    fields after the URL of apt_repository's one-line form."""
    if "suites" in args:
        suites, components = args.get("suites") or [], args.get("components") or []
        return " ".join([*_names(suites), *_names(components)])
    line = re.sub(r"\[[^\]]*\]", "", str(args.get("repo") or "")).split()
    return " ".join(line[2:]) if line[:1] == ["deb"] else ""


def _wheels(args: dict[str, Any], common: dict[str, str]) -> list[Artifact]:
    extra = str(args.get("extra_args") or "")
    index = re.search(r"--(?:extra-)?index-url[= ](\S+)", extra)
    links = re.search(r"--find-links[= ](\S+)", extra)
    source = index[1] if index else links[1] if links else "https://pypi.org/simple"
    version = str(args.get("version") or "")
    out = []
    for spec in _names(args.get("name")):
        name, _, pinned = spec.partition("==")
        out.append(Artifact("wheel", name.strip(), pinned.strip() or version, source=source,
                            **common))  # fmt: skip
    return out
