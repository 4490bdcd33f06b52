"""kiln_slurm.repository: a site's repository of Slurm packages at an exact version."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_URL = r"^https?://[A-Za-z0-9._~:/%+@=-]+$"
_TOKEN = re.compile(r"^[A-Za-z0-9._:/@%+,=-]+$")


class SlurmRepositorySpec(BaseModel):
    """Packages at the exact kiln_versions.slurm: SchedMD-built (slurm-smd-* debs, slurm RPMs),
    or on apt a site's rebuild or mirror of the distribution's packaging (slurmd, slurmctld)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    url: str = Field(pattern=_URL, description="its base URL")
    key_url: str = Field(pattern=_URL, description="URL of its signing key (ASCII armoured)")
    key_fingerprint: str | None = Field(
        None,
        pattern=r"^[0-9A-Fa-f]{40}$",
        description="the key's fingerprint (40 hex digits): a key with another is refused",
    )
    suite: str = Field("./", pattern=r"^[A-Za-z0-9._/-]+$", description="apt suite ('./': flat)")
    components: list[str] = Field(default_factory=list, description="apt components, if any")
    packages: Literal["schedmd", "debian"] = Field(
        "schedmd",
        description="how its debs are named: schedmd (slurm-smd-client, slurm-smd-slurmd, ...) "
        "or debian (slurm-client, slurmd, ...: a rebuild of Debian's packaging); RPMs are "
        "named alike either way",
    )

    @field_validator("components")
    @classmethod
    def _safe_components(cls, value: list[str]) -> list[str]:
        for item in value:
            if not _TOKEN.match(item):
                raise ValueError(f"component {item!r} must be one plain token")
        return value
