#!/usr/bin/python
"""Ansible module: read a node's CPUs, memory, NVIDIA PCI devices and IB HCAs.

nvidia-smi is read by its own module (playbooks/library/kiln_nvidia_smi.py).

One round trip, read-only, parsed into structured data (no shell pipelines).
"""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: kiln_hw_facts
short_description: Read CPUs, memory, NVIDIA PCI devices and InfiniBand HCAs of a node
description:
  - Reads /proc/cpuinfo, /proc/meminfo, /sys/bus/pci/devices (vendor 0x10de, class 0x0302 or
    0x0300) and /sys/class/infiniband. Changes nothing.
options: {}
author: kiln
"""

RETURN = r"""
cpus: {description: Logical CPUs, type: int, returned: always}
memory_mb: {description: Total memory in MiB, type: int, returned: always}
gpu_pci: {description: NVIDIA GPUs on the PCI bus (address, device), type: list, returned: always}
ib_hcas: {description: HCA names under /sys/class/infiniband, type: list, returned: always}
"""

NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0302", "0x0300")  # 3D controller, VGA controller (NVSwitch is 0x0680)


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


def gpu_pci(root="/sys/bus/pci/devices"):
    devices = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return devices
    for name in names:
        base = os.path.join(root, name)
        if _read(os.path.join(base, "vendor")) != NVIDIA_VENDOR:
            continue
        if _read(os.path.join(base, "class"))[:6] not in GPU_CLASSES:
            continue
        devices.append({"address": name, "device": _read(os.path.join(base, "device"))})
    return devices


def ib_hcas(root="/sys/class/infiniband"):
    try:
        return sorted(os.listdir(root))
    except OSError:
        return []


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.exit_json(
        changed=False,
        cpus=cpu_count(),
        memory_mb=memory_mb(),
        gpu_pci=gpu_pci(),
        ib_hcas=ib_hcas(),
    )


if __name__ == "__main__":
    main()
