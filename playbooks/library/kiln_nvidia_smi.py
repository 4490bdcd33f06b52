#!/usr/bin/python
"""Ansible module: run `nvidia-smi -q -x` and `nvidia-smi nvlink --status`, packed (gzip + base64).

Read-only. kiln parses the XML on the controller (kiln.gpu.facts through a filter), so the parser
that reads recorded real outputs in the unit tests is the one that reads the fleet.
"""

from __future__ import annotations

import base64
import gzip

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: kiln_nvidia_smi
short_description: Read every GPU's state with nvidia-smi -q -x
description:
  - Runs C(nvidia-smi -q -x) and C(nvidia-smi nvlink --status) when nvidia-smi is installed.
    Changes nothing.
options: {}
author: kiln
"""

RETURN = r"""
installed: {description: nvidia-smi is on the PATH, type: bool, returned: always}
exit_status: {description: "nvidia-smi's exit status, null when not installed", type: int,
  returned: always}
error: {description: what nvidia-smi printed when it failed, type: str, returned: always}
xml_packed: {description: "the XML, gzip-compressed and base64-encoded, or empty", type: str,
  returned: always}
nvlink_packed: {description: "nvlink --status output, packed likewise; empty when it failed",
  type: str, returned: always}
"""


def pack(text):
    return base64.b64encode(gzip.compress(text.encode())).decode()


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    binary = module.get_bin_path("nvidia-smi")
    if not binary:
        module.exit_json(
            changed=False,
            installed=False,
            exit_status=None,
            error="",
            xml_packed="",
            nvlink_packed="",
        )
    rc, out, err = module.run_command([binary, "-q", "-x"])
    packed = pack(out) if rc == 0 else ""
    error = "" if rc == 0 else (err or out).strip()[:1000]
    nvlink_packed = ""
    if rc == 0:
        # Without NVLink, or on a driver that cannot say, this fails: the links are unknown.
        nvlink_rc, nvlink_out, _ = module.run_command([binary, "nvlink", "--status"])
        nvlink_packed = pack(nvlink_out) if nvlink_rc == 0 and nvlink_out.strip() else ""
    # Not `rc`: Ansible fails any result whose rc is not 0, and a broken driver is a fact here.
    module.exit_json(
        changed=False,
        installed=True,
        exit_status=rc,
        error=error,
        xml_packed=packed,
        nvlink_packed=nvlink_packed,
    )


if __name__ == "__main__":
    main()
