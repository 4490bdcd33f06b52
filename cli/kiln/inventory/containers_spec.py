"""kiln_containers: containers in jobs (the containers stage, docs/containers.md, issue 31).

runtime oci: Slurm's own OCI support (`srun --container=BUNDLE`): crun, skopeo and umoci from
the OS's packages, oci.conf beside slurm.conf, and each declared image unpacked as an OCI bundle
on every compute node at <bundle_dir>/<registry>/<repository>/<tag>.

runtime pyxis: enroot (its packages at a declared version, each checked against its SHA-256)
and pyxis (its source at a declared version, checked the same way, built on each node against
the Slurm installed there), `srun --container-image=IMAGE`.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kiln.inventory.mirror_spec import IMAGE_REFERENCE, image_references

_PATH = re.compile(r"^/[A-Za-z0-9._/-]+$")
_REGISTRY = re.compile(r"^[a-z0-9.-]+(:\d+)?$")

# The key as the schema's catalogue lists it (kiln.inventory.schema.KEYS).
CONTAINERS_KEY = (
    "kiln_containers",
    "cluster",
    "ContainersSpec",
    "containers in jobs: Slurm's OCI support with crun, or enroot and pyxis (docs/containers.md)",
    "off",
)
REGISTRY_PASSWORD_KEY = (
    "kiln_registry_password",
    "cluster",
    "secret",
    "the password of kiln_containers.login (ansible-vault only)",
    "none",
)


class _Spec(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class RegistryLogin(_Spec):
    registry: str = Field(description="the registry host, e.g. nvcr.io")
    username: str = Field(description="the user name (nvcr.io: $oauthtoken)")

    @field_validator("registry")
    @classmethod
    def _host(cls, value: str) -> str:
        if not _REGISTRY.match(value):
            raise ValueError(f"{value!r} is not a registry host[:port]")
        return value

    @field_validator("username")
    @classmethod
    def _user(cls, value: str) -> str:
        if not re.match(r"^[$A-Za-z0-9._@-]+$", value):
            raise ValueError("must be letters, digits and $ . _ @ - only")
        return value


class Download(_Spec):
    """A file fetched by URL (through kiln_mirror when set) and checked before it is used."""

    url: str = Field(pattern=r"^https?://[A-Za-z0-9._~:/%+@=-]+$", description="where it is")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="its SHA-256 (64 hex digits)")


class EnrootSpec(_Spec):
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$", description="enroot's version, e.g. 3.5.0")
    packages: list[Download] = Field(
        min_length=1,
        description="its packages for the nodes' OS (enroot and enroot+caps, .deb or .rpm), "
        "from the site's mirror or NVIDIA's release",
    )
    runtime_path: str = Field(
        "/run/enroot/user-$(id -u)", description="ENROOT_RUNTIME_PATH (a tmpfs: /run)"
    )
    data_path: str = Field(
        "/run/enroot/data/user-$(id -u)",
        description="ENROOT_DATA_PATH: unpacked containers (a tmpfs by default: gone at reboot)",
    )
    cache_path: str = Field(
        "/var/lib/enroot/cache/group-$(id -g)",
        description="ENROOT_CACHE_PATH: image layers (local disk, shared by a group)",
    )

    @field_validator("packages")
    @classmethod
    def _versioned(cls, value: list[Download]) -> list[Download]:
        for download in value:
            if not re.search(r"\.(deb|rpm)$", download.url):
                raise ValueError(f"{download.url} is not a .deb or .rpm")
        return value

    @model_validator(mode="after")
    def _version_in_names(self) -> EnrootSpec:
        for download in self.packages:
            if self.version not in download.url.rsplit("/", 1)[-1]:
                raise ValueError(f"{download.url} is not enroot {self.version}'s package")
        return self


class PyxisSpec(_Spec):
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$", description="pyxis's version, e.g. 0.20.0")
    source: Download = Field(description="its source tarball (built on each node)")
    runtime_path: str = Field("/run/pyxis", description="pyxis's runtime_path (a tmpfs)")

    @model_validator(mode="after")
    def _version_in_name(self) -> PyxisSpec:
        if self.version not in self.source.url.rsplit("/", 1)[-1]:
            raise ValueError(f"{self.source.url} is not pyxis {self.version}'s source")
        return self


class ContainersSpec(_Spec):
    enabled: bool = Field(False, description="the containers stage runs (kiln plan shows it)")
    runtime: Literal["oci", "pyxis"] = Field(
        "oci", description="oci: Slurm's own with crun; pyxis: enroot and pyxis"
    )
    enroot: EnrootSpec | None = Field(None, description="runtime pyxis: enroot's packages")
    pyxis: PyxisSpec | None = Field(None, description="runtime pyxis: pyxis's source")
    images: list[str] = Field(
        default_factory=list,
        description="images made ready on every compute node (oci: as bundles), with their "
        "registry and a tag or digest, e.g. nvcr.io/nvidia/pytorch:24.05-py3",
    )
    insecure_registries: list[str] = Field(
        default_factory=list, description="registries reached over plain HTTP (host:port)"
    )
    bundle_dir: str = Field(
        "/var/lib/kiln/containers", description="where the OCI bundles are unpacked (oci)"
    )
    login: RegistryLogin | None = Field(
        None, description="a registry login; its password is kiln_registry_password (vault)"
    )

    _references = field_validator("images")(image_references)

    @field_validator("insecure_registries")
    @classmethod
    def _registries(cls, value: list[str]) -> list[str]:
        for registry in value:
            if not _REGISTRY.match(registry):
                raise ValueError(f"{registry!r} is not a registry host[:port]")
        return value

    @model_validator(mode="after")
    def _runtime_parts(self) -> ContainersSpec:
        if self.runtime == "pyxis" and (self.enroot is None or self.pyxis is None):
            raise ValueError("runtime pyxis needs enroot (its packages) and pyxis (its source)")
        if self.runtime == "oci" and (self.enroot is not None or self.pyxis is not None):
            raise ValueError("enroot and pyxis are set but runtime is oci")
        return self

    @field_validator("bundle_dir")
    @classmethod
    def _path(cls, value: str) -> str:
        if not _PATH.match(value) or "/../" in f"{value}/":
            raise ValueError("must be an absolute path of plain characters")
        return value


def bundle_path(bundle_dir: str, reference: str) -> str:
    """Where an image's OCI bundle lies on a node: <bundle_dir>/<registry>/<repository>/<tag or
    digest> ('nvcr.io/nvidia/pytorch:24.05-py3' -> '.../nvcr.io/nvidia/pytorch/24.05-py3')."""
    match = IMAGE_REFERENCE.match(reference)
    if match is None:
        raise ValueError(f"{reference!r} is not an image reference")
    version = match["digest"].replace(":", "-") if match["digest"] else match["tag"]
    return f"{bundle_dir}/{match['host']}/{match['repository']}/{version}"


def image_registry(reference: str) -> str:
    """The registry host[:port] an image reference names."""
    match = IMAGE_REFERENCE.match(reference)
    if match is None:
        raise ValueError(f"{reference!r} is not an image reference")
    return match["host"]


def image_pinned(reference: str, digest: str) -> str:
    """The reference by digest ('nvcr.io/nvidia/pytorch:24.05-py3', 'sha256:...' ->
    'nvcr.io/nvidia/pytorch@sha256:...'): what a pull names so a moved tag cannot slip in."""
    match = IMAGE_REFERENCE.match(reference)
    if match is None or not re.match(r"^sha256:[0-9a-f]{64}$", digest):
        raise ValueError(f"cannot pin {reference!r} to {digest!r}")
    if match["digest"] and match["digest"] != digest:
        raise ValueError(f"{reference!r} is pinned to another digest than the registry's {digest}")
    return f"{match['host']}/{match['repository']}@{digest}"


def mirrored_image(reference: str, mirror_url: str | None) -> str:
    """Where a node pulls the image from: the reference itself, or with kiln_mirror.url set the
    mirror's copy, which `kiln mirror serve` answers as a registry at the mirror's host
    ('nvcr.io/nvidia/pytorch:24.05-py3', 'http://mirror:8080/kiln' ->
    'mirror:8080/nvcr.io/nvidia/pytorch:24.05-py3')."""
    if not mirror_url:
        return reference
    return f"{urlsplit(mirror_url).netloc}/{reference}"


def pyxis_image(reference: str) -> str:
    """An image reference as pyxis names it, the registry set apart by '#'
    ('nvcr.io/nvidia/pytorch:24.05-py3' -> 'nvcr.io#nvidia/pytorch:24.05-py3')."""
    host = image_registry(reference)
    return f"{host}#{reference[len(host) + 1 :]}"


# The host's name resolution, bound read-only into every bundle (as enroot does): the
# cluster's node names resolve inside a job step's container.
HOST_FILES = ("/etc/hosts", "/etc/resolv.conf")
_HOSTS_OWN = ("network", "uts")  # namespaces a job step shares with its node
_SYSFS = {"destination": "/sys", "type": "bind", "source": "/sys",
          "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]}  # fmt: skip


def rootless_bundle_config(config: dict) -> dict:
    """An unpacked image's runtime configuration as Slurm's rootless crun runs a job step:

    - mount options naming a group id dropped (devpts' gid=5, tty: no group but the user's is
      mapped in a rootless container's user namespace, and the mount fails with EINVAL);
    - the host's network and name (no network or UTS namespace): a step's ranks on different
      nodes reach each other over the node's own interfaces and see its hostname, as MPI, NCCL
      and torch.distributed expect; sysfs cannot then be mounted anew (the kernel allows it
      only in a network namespace the user namespace owns), so /sys is the host's, read-only;
    - the host's /etc/hosts and /etc/resolv.conf, read-only (HOST_FILES).

    The same result for a configuration given twice (the role applies it at every run)."""
    mounts = []
    for mount in config.get("mounts", []):
        if mount.get("destination") in HOST_FILES:
            continue
        if mount.get("destination") == "/sys":
            mount = _SYSFS
        options = [o for o in mount.get("options", []) if not o.startswith("gid=")]
        mounts.append({**mount, "options": options})
    mounts += [{"destination": path, "type": "bind", "source": path,
                "options": ["bind", "nosuid", "nodev", "ro"]} for path in HOST_FILES]  # fmt: skip
    linux = config.get("linux", {})
    namespaces = [ns for ns in linux.get("namespaces", []) if ns.get("type") not in _HOSTS_OWN]
    rest = {key: value for key, value in config.items() if key != "hostname"}
    return {**rest, "mounts": mounts, "linux": {**linux, "namespaces": namespaces}}


# The slurm_oci role's filters (playbooks/filter_plugins/kiln_filters.py).
FILTERS = {
    "kiln_bundle_path": bundle_path,
    "kiln_image_registry": image_registry,
    "kiln_image_pinned": image_pinned,
    "kiln_rootless_bundle_config": rootless_bundle_config,
    "kiln_mirrored_image": mirrored_image,
}
