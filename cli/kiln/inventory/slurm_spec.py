"""kiln_slurm.repository: a site's repository of SchedMD-built Slurm packages."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

_URL = r"^https?://[A-Za-z0-9._~:/%+@=-]+$"
_TOKEN = re.compile(r"^[A-Za-z0-9._:/@%+,=-]+$")


class SlurmRepositorySpec(BaseModel):
    """SchedMD-built packages (slurm-smd-* debs, slurm RPMs) at the exact kiln_versions.slurm."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    url: str = Field(pattern=_URL, description="its base URL")
    key_url: str = Field(pattern=_URL, description="URL of its signing key (ASCII armoured)")
    suite: str = Field("./", pattern=r"^[A-Za-z0-9._/-]+$", description="apt suite ('./': flat)")
    components: list[str] = Field(default_factory=list, description="apt components, if any")

    @field_validator("components")
    @classmethod
    def _safe_components(cls, value: list[str]) -> list[str]:
        for item in value:
            if not _TOKEN.match(item):
                raise ValueError(f"component {item!r} must be one plain token")
        return value
