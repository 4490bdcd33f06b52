"""Ansible filter shim: the role judges HCAs and derives IPoIB addresses with kiln's own,
unit-tested code (kiln.fabric.links, kiln.fabric.ipoib)."""

from ansible.errors import AnsibleFilterError

from kiln.fabric.ipoib import IpoibError, ipoib_addresses
from kiln.fabric.links import (
    check_rails,
    error_counter_deltas,
    parse_sysfs_dump,
    port_error_counters,
    sysfs_dump_command,
)


def kiln_ib_rails(declared, sysfs_dump, rate_gbps=None, port=1):
    """One dict per declared rail: rail, binding, hca, node_guid, port_guid, pci, problems."""
    views = parse_sysfs_dump(sysfs_dump or "")
    rate = float(rate_gbps) if rate_gbps not in (None, "", "None") else None
    return [r.to_dict() for r in check_rails(list(declared), views, rate, int(port))]


def kiln_ib_error_counters(sysfs_dump, hcas, port=1):
    """HCA -> error counter -> value, for the given HCAs' port."""
    return port_error_counters(parse_sysfs_dump(sysfs_dump or ""), hcas, int(port))


def kiln_ib_counter_rises(after, before):
    return error_counter_deltas(before or {}, after or {})


def kiln_ipoib_addresses(networks, management_address, explicit=None):
    try:
        return ipoib_addresses([n["network"] for n in networks], str(management_address), explicit)
    except IpoibError as error:
        raise AnsibleFilterError(str(error)) from error


class FilterModule:
    def filters(self):
        return {
            "kiln_ib_rails": kiln_ib_rails,
            "kiln_ib_error_counters": kiln_ib_error_counters,
            "kiln_ib_counter_rises": kiln_ib_counter_rises,
            "kiln_ipoib_addresses": kiln_ipoib_addresses,
            "kiln_ib_sysfs_dump_command": sysfs_dump_command,
        }
