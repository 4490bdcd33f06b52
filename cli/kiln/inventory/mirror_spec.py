"""kiln_mirror: the mirror the nodes fetch every artifact from (air-gapped sites, issue 30).

With a url, every source kiln's roles and version tables name is fetched from the mirror, at
<url>/<host>/<path> of the upstream source (kiln.mirror.layout, the roles' kiln_mirrored
filter); a URL the inventory sets itself is used as written. offline: true also makes
`kiln validate` refuse every source the inventory names outside the mirror
(kiln.inventory.rules.mirror), so a site without a route out learns it before a stage runs.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# It lands in apt sources, dnf baseurls and pip's command line: plain URL characters only.
_URL_CHARS = re.compile(r"^[A-Za-z0-9._~:/%+@=-]+$")
# An image reference with its registry named (host[:port]/repository[:tag][@sha256:digest]):
# no implied docker.io, so the mirror's copy has one unambiguous name.
IMAGE_REFERENCE = re.compile(
    r"^(?P<host>[a-z0-9.-]+\.[a-z0-9.-]+(?::\d+)?|localhost(?::\d+)?|[a-z0-9.-]+:\d+)/"
    r"(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


def image_references(value: list[str]) -> list[str]:
    """Each an image reference with its registry and a tag or digest (kiln_mirror.images,
    kiln_containers.images): what a pull names unambiguously."""
    for reference in value:
        match = IMAGE_REFERENCE.match(reference)
        if match is None or not (match["tag"] or match["digest"]):
            raise ValueError(
                f"{reference!r} is not an image reference with its registry and a tag or "
                "digest (nvcr.io/nvidia/pytorch:24.05-py3, docker.io/library/ubuntu@sha256:...)"
            )
    return value


# The key as the schema's catalogue lists it (kiln.inventory.schema.KEYS).
MIRROR_KEY = (
    "kiln_mirror",
    "cluster",
    "MirrorSpec",
    "the mirror every artifact is fetched from, and offline mode (docs/operations.md, "
    "Behind a firewall)",
    "none: each source is fetched from where it is published",
)


class MirrorSpec(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    url: str | None = Field(
        None, description="the mirror's root, e.g. http://mirror.example:8080/kiln"
    )
    offline: bool = Field(
        False, description="validate refuses every source the inventory names outside the mirror"
    )
    images: list[str] = Field(
        default_factory=list,
        description="container images the cluster's jobs pull, mirrored by `kiln mirror` and "
        "served at <url>/v2/<registry>/<repository>, e.g. nvcr.io/nvidia/pytorch:24.05-py3",
    )

    _references = field_validator("images")(image_references)

    @field_validator("url")
    @classmethod
    def _http_root(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL such as http://mirror.example/kiln")
        if not _URL_CHARS.match(value):
            raise ValueError("must be a plain URL: letters, digits and . _ ~ : / % + @ = - only")
        return value

    @model_validator(mode="after")
    def _offline_needs_a_mirror(self) -> MirrorSpec:
        if self.offline and self.url is None:
            raise ValueError("offline: true needs url, the mirror every source is fetched from")
        return self
