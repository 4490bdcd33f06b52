"""kiln_ib: the InfiniBand fabric (docs/fabric.md), as the inventory sets it."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class StrictModel(BaseModel):
    # As kiln.inventory.schema.StrictModel (which imports this module).
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class IpoibRailSpec(StrictModel):
    network: str = Field(description="the rail's IPoIB network, e.g. 10.100.0.0/16")
    mtu: int | None = Field(None, gt=0, description="MTU; unset keeps the driver's")

    @field_validator("network")
    @classmethod
    def _network(cls, value: str) -> str:
        try:
            ipaddress.ip_network(value, strict=True)
        except ValueError as error:
            raise ValueError(f"must be a network such as 10.100.0.0/16 ({error})") from None
        return value


class IbSpec(StrictModel):
    subnet_manager: Literal["opensm", "external"] = Field(
        "external", description="opensm on opensm_hosts, or a managed SM (UFM, switch)"
    )
    opensm_hosts: list[str] = Field(
        default_factory=list, description="hosts running opensm; the first is the master"
    )
    link_rate_gbps: int | None = Field(
        400, gt=0, description="rate every declared HCA port must run at; null: not checked"
    )
    ipoib: list[IpoibRailSpec] = Field(
        default_factory=list, description="one IPoIB network per rail, in rail order"
    )

    @model_validator(mode="after")
    def _sm_hosts(self) -> IbSpec:
        if self.subnet_manager == "opensm" and not self.opensm_hosts:
            raise ValueError("subnet_manager opensm needs opensm_hosts (at least one host)")
        if self.subnet_manager == "external" and self.opensm_hosts:
            raise ValueError("opensm_hosts is set but subnet_manager is external")
        return self
