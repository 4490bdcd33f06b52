"""The IPoIB address of each rail of a node.

The inventory gives one network per rail (kiln_ib.ipoib). A node's address on a rail is that
network plus the host part of its management address, taken under the rail's prefix:
management 10.0.1.23 with rail network 10.100.0.0/16 gives 10.100.1.23/16. A node may list
its addresses instead (kiln_ib_ipoib_addresses, one per rail, with the prefix length).

The infiniband role calls `ipoib_addresses` through its filter plugin, so both agree.
"""

from __future__ import annotations

import ipaddress


class IpoibError(ValueError):
    pass


def ipoib_address(network: str, management_address: str) -> str:
    """`network` plus the host part of `management_address`, as "address/prefix"."""
    net = ipaddress.ip_network(network, strict=True)
    try:
        mgmt = ipaddress.ip_address(management_address)
    except ValueError as error:
        raise IpoibError(
            f"management address {management_address!r} is not an IP address; "
            "list the node's IPoIB addresses in kiln_ib_ipoib_addresses"
        ) from error
    if mgmt.version != net.version:
        raise IpoibError(f"{management_address} and {network} are different IP versions")
    host = int(mgmt) & int(net.hostmask)
    if host in (0, int(net.hostmask)) and net.prefixlen < net.max_prefixlen - 1:
        raise IpoibError(
            f"the host part of {management_address} under /{net.prefixlen} is the "
            f"{'network' if host == 0 else 'broadcast'} address of {network}"
        )
    return f"{net.network_address + host}/{net.prefixlen}"


def ipoib_addresses(
    networks: list[str], management_address: str, explicit: list[str] | None = None
) -> list[str]:
    """One "address/prefix" per rail: `explicit` when given, else derived from `networks`."""
    if explicit:
        for text in explicit:
            try:
                ipaddress.ip_interface(text)
            except ValueError as error:
                raise IpoibError(
                    f"{text!r} is not an address/prefix such as 10.100.1.23/16"
                ) from error
            if "/" not in text:
                raise IpoibError(f"{text!r} has no prefix length (write 10.100.1.23/16)")
        return list(explicit)
    return [ipoib_address(network, management_address) for network in networks]
