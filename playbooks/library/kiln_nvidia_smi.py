#!/usr/bin/python
"""Ansible module: run `nvidia-smi -q -x`, `nvlink --status` and `topo -m`, packed (gzip + base64).

Read-only. kiln parses the outputs on the controller (kiln.gpu through filters), so the parsers
that read recorded real outputs in the unit tests are the ones that read the fleet. Where the XML
is not available (`-q -x` fails), the plain-text `nvidia-smi -q` is returned instead, which
kiln.parsers.nvidia_smi_text reads into the same model.
"""

from __future__ import annotations

import base64
import gzip

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: kiln_nvidia_smi
short_description: Read every GPU's state with nvidia-smi -q -x
description:
  - Runs C(nvidia-smi -q -x) and C(nvidia-smi nvlink --status) when nvidia-smi is installed,
    C(nvidia-smi -q) where the XML fails, and C(nvidia-smi topo -m) when asked. Changes nothing.
options:
  topology:
    description: Also read the GPU/NIC affinity matrix (C(nvidia-smi topo -m)).
    type: bool
    default: false
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
text_packed: {description: "plain-text nvidia-smi -q, packed likewise; only where -q -x failed and
  -q worked, else empty", type: str, returned: always}
topo_packed: {description: "topo -m output, packed likewise; empty when not asked or it failed",
  type: str, returned: always}
"""


def pack(text):
    return base64.b64encode(gzip.compress(text.encode())).decode()


def _read(module, binary, *args):
    """The packed output of `nvidia-smi ARGS`, or "" when it fails or prints nothing."""
    rc, out, _ = module.run_command([binary, *args])
    return pack(out) if rc == 0 and out.strip() else ""


def main():
    module = AnsibleModule(
        argument_spec={"topology": {"type": "bool", "default": False}},
        supports_check_mode=True,
    )
    binary = module.get_bin_path("nvidia-smi")
    if not binary:
        module.exit_json(
            changed=False,
            installed=False,
            exit_status=None,
            error="",
            xml_packed="",
            nvlink_packed="",
            text_packed="",
            topo_packed="",
        )
    rc, out, err = module.run_command([binary, "-q", "-x"])
    packed = pack(out) if rc == 0 else ""
    error = "" if rc == 0 else (err or out).strip()[:1000]
    # Where the XML fails (a driver or vGPU build without -x), the text carries the same facts.
    text_packed = "" if rc == 0 else _read(module, binary, "-q")
    nvlink_packed = topo_packed = ""
    if packed or text_packed:
        # Without NVLink, or on a driver that cannot say, this fails: the links are unknown.
        nvlink_packed = _read(module, binary, "nvlink", "--status")
        if module.params["topology"]:
            topo_packed = _read(module, binary, "topo", "-m")
    # Not `rc`: Ansible fails any result whose rc is not 0, and a broken driver is a fact here.
    # exit_status stays the XML's: callers that read only xml_packed test it.
    module.exit_json(
        changed=False,
        installed=True,
        exit_status=rc,
        error=error,
        xml_packed=packed,
        nvlink_packed=nvlink_packed,
        text_packed=text_packed,
        topo_packed=topo_packed,
    )


if __name__ == "__main__":
    main()
