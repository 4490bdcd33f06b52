"""kiln_rollout.receptor: the Receptor mesh kiln reaches its worker controllers through."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

RECEPTOR_SOCKET = re.compile(r"^(tls://[A-Za-z0-9.:-]+:[0-9]+|(unix://)?/[^:]+)$")


class ReceptorSpec(BaseModel):
    """Where kiln reaches a Receptor mesh's control service, and its TLS client credentials."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    socket: str = Field(
        ...,
        description="the control service: a Unix socket path (a Receptor node on this machine) "
        "or tls://HOST:PORT (a node's TLS control listener)",
    )
    ca: str | None = Field(None, description="the mesh CA certificate (tls:// only)")
    cert: str | None = Field(None, description="kiln's client certificate (tls:// only)")
    key: str | None = Field(None, description="kiln's client key (tls:// only)")

    @field_validator("socket")
    @classmethod
    def _socket(cls, value: str) -> str:
        if not RECEPTOR_SOCKET.match(value):
            raise ValueError("must be a Unix socket path or tls://HOST:PORT")
        return value

    @model_validator(mode="after")
    def _tls(self) -> ReceptorSpec:
        if self.socket.startswith("tls://") and not (self.ca and self.cert and self.key):
            raise ValueError("a tls:// control service needs ca, cert and key")
        return self
