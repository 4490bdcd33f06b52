"""kiln_slurm: Slurm's options (SlurmSpec), and kiln_slurm.repository, a site's repository of
Slurm packages at an exact version."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kiln.inventory.accounting_spec import Accounting, AccountingSpec

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


class SlurmSpec(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    # true/false, or a mapping that also declares what sacctmgr holds (docs/slurm.md)
    accounting: Accounting = Field(False, description="slurmdbd with MariaDB for job accounting")
    source: Literal["distribution", "repository"] = Field(
        "distribution",
        description="where Slurm comes from: the nodes' OS release (the version it ships), or "
        "`repository` (SchedMD-built packages at the exact kiln_versions.slurm)",
    )
    repository: SlurmRepositorySpec | None = Field(
        None, description="the repository of source: repository (url, key_url, suite)"
    )
    imex: bool = Field(
        False, description="SwitchType=switch/nvidia_imex: IMEX channels per job (Slurm 24.05+)"
    )
    cgroup: bool = Field(
        True,
        description="confine jobs with cgroups (off in containers, whose cgroups are the host's)",
    )
    quarantine_new_nodes: bool = Field(
        True, description="new nodes join drained until burn-in passes"
    )
    topology: Literal["racks", "fabric", "block"] = Field(
        "racks",
        description="topology.conf from the inventory's racks and leaf switches, from the "
        "fabric as a stored ibnetdiscover capture shows it, or `block`: topology/block with a "
        "block per NVLink domain (kiln_nvlink_domain; NVL72 racks, Slurm 24.05 on)",
    )
    block_base: int | None = Field(
        None,
        gt=0,
        description="topology block: nodes in a base block (BlockSizes' first); default the "
        "smallest domain's node count",
    )
    ibnetdiscover_file: str | None = Field(
        None,
        description="ibnetdiscover output, relative to the inventory directory (topology: fabric)",
    )

    @field_validator("ibnetdiscover_file")
    @classmethod
    def _safe_path(cls, value: str | None) -> str | None:
        # It lands in topology.conf's header and in messages: one plain token.
        if value is not None and not _TOKEN.match(value):
            raise ValueError("must be a path of letters, digits and . _ - / only")
        return value

    @property
    def accounting_on(self) -> bool:
        return self.accounting is not False

    @property
    def declared_accounting(self) -> AccountingSpec | None:  # None: accounting: true/false
        return self.accounting if isinstance(self.accounting, AccountingSpec) else None

    def base_block(self, domain_sizes: list[int]) -> int:
        """topology block: the nodes of a base block, the declared block_base or else the
        smallest domain (slurmctld refuses to start with a block smaller than the base:
        "children count lower than bblock_node_cnt")."""
        return self.block_base or min(domain_sizes, default=1)

    @model_validator(mode="after")
    def _topology_source(self) -> SlurmSpec:
        if self.source == "repository" and self.repository is None:
            raise ValueError("source repository needs repository (url and key_url)")
        if self.source == "distribution" and self.repository is not None:
            raise ValueError("repository is set but source is distribution")
        if self.topology == "fabric" and not self.ibnetdiscover_file:
            raise ValueError("topology fabric needs ibnetdiscover_file (a stored capture)")
        if self.topology != "fabric" and self.ibnetdiscover_file:
            raise ValueError(f"ibnetdiscover_file is set but topology is {self.topology}")
        if self.topology != "block" and self.block_base is not None:
            raise ValueError(f"block_base is set but topology is {self.topology}")
        return self
