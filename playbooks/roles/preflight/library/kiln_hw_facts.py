#!/usr/bin/python
"""Ansible module: read a node's CPUs, memory, GPUs on the PCI bus and IB HCAs.

nvidia-smi is read by its own module (playbooks/library/kiln_nvidia_smi.py).

One round trip, read-only, parsed into structured data (no shell pipelines).
"""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: kiln_hw_facts
short_description: Read CPUs, memory, GPUs on the PCI bus and InfiniBand HCAs of a node
description:
  - Reads /proc/cpuinfo, /proc/meminfo, /sys/bus/pci/devices (NVIDIA's GPUs, vendor 0x10de and
    class 0x0302 or 0x0300; or AMD Instinct's, vendor 0x1002 and class 0x1200 or 0x0380) and
    /sys/class/infiniband. Changes nothing.
options:
  gpu_vendor:
    description: Whose GPUs to count, nvidia or amd (kiln_gpu_vendor).
    type: str
    default: nvidia
    choices: [nvidia, amd]
author: kiln
"""

RETURN = r"""
cpus: {description: Logical CPUs, type: int, returned: always}
memory_mb: {description: Total memory in MiB, type: int, returned: always}
gpu_pci: {description: the vendor's GPUs on the bus (address, device), type: list, returned: always}
ib_hcas: {description: HCA names under /sys/class/infiniband, type: list, returned: always}
"""

# PCI vendor -> the classes its GPUs show: NVIDIA's 3D or VGA controllers (an NVSwitch is
# 0x0680); AMD Instinct's processing accelerators (MI210, MI300X, MI325X) or display controllers
# (MI100, MI250), never its audio functions (0x0403) beside them.
GPU_CLASSES = {
    "nvidia": ("0x10de", ("0x0302", "0x0300")),
    "amd": ("0x1002", ("0x1200", "0x0380")),
}


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def cpu_count():
    count = sum(1 for line in _read("/proc/cpuinfo").splitlines() if line.startswith("processor"))
    return count or os.cpu_count() or 0


def memory_mb():
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 0


def gpu_pci(root="/sys/bus/pci/devices", vendor="nvidia"):
    vendor_id, classes = GPU_CLASSES[vendor]
    devices = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return devices
    for name in names:
        base = os.path.join(root, name)
        if _read(os.path.join(base, "vendor")) != vendor_id:
            continue
        if _read(os.path.join(base, "class"))[:6] not in classes:
            continue
        devices.append({"address": name, "device": _read(os.path.join(base, "device"))})
    return devices


def ib_hcas(root="/sys/class/infiniband"):
    try:
        return sorted(os.listdir(root))
    except OSError:
        return []


def main():
    module = AnsibleModule(
        argument_spec={
            "gpu_vendor": {"type": "str", "default": "nvidia", "choices": ["nvidia", "amd"]}
        },
        supports_check_mode=True,
    )
    module.exit_json(
        changed=False,
        cpus=cpu_count(),
        memory_mb=memory_mb(),
        gpu_pci=gpu_pci(vendor=module.params["gpu_vendor"]),
        ib_hcas=ib_hcas(),
    )


if __name__ == "__main__":
    main()
