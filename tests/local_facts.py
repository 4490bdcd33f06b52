"""Run kiln's preflight on this machine through a local connection and read `kiln facts`.

Shared by tests/gpu (a real GPU machine, `make gpu-check`) and tests/integration (any machine):
the inventory declares no GPU model, so validation accepts any machine, and preflight's GPU
count check is off; the facts are what is being checked.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from kiln.profiles.platforms import load_platforms

KILN = str(Path(sys.executable).parent / "kiln")
# /etc/os-release's ID as Ansible's ansible_distribution names it (what kiln's table reads).
DISTRIBUTIONS = {"debian": "Debian", "ubuntu": "Ubuntu", "rhel": "RedHat", "rocky": "Rocky",
                 "almalinux": "AlmaLinux"}  # fmt: skip


def this_platform() -> tuple[str, str]:
    """(kiln_os, kiln_arch) of this machine, so the inventory declares what preflight will see
    (a GPU machine runs Ubuntu 24.04, say, not the default debian-12)."""
    lines = Path("/etc/os-release").read_text().splitlines()
    release = {k: v.strip('"') for k, _, v in (line.partition("=") for line in lines) if v}
    facts = {"distribution": DISTRIBUTIONS.get(release.get("ID", ""), release.get("ID")),
             "distribution_version": release.get("VERSION_ID", "")}  # fmt: skip
    os_id = load_platforms().os_of_facts(facts)
    assert os_id, f"kiln has no platform entry for {release.get('PRETTY_NAME')}"
    return os_id, platform.machine()


def local_facts(tmp_path: Path) -> tuple[dict, dict]:
    """(the provision summary, this machine's facts) after `kiln provision --stages preflight`."""
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    kiln_os, kiln_arch = this_platform()
    (inventory / "hosts.yml").write_text(
        "all:\n"
        "  vars:\n"
        "    kiln_state: {backend: local}\n"  # ctl is a placeholder: no controller to lock on
        "  children:\n"
        "    kiln_controllers:\n"
        "      hosts:\n"
        "        ctl: {kiln_gpu_model: none, ansible_host: 192.0.2.1}\n"
        "    kiln_compute:\n"
        "      hosts:\n"
        "        localhost:\n"
        "          kiln_gpu_model: none\n"
        "          kiln_rack: r1\n"
        f"          kiln_os: {kiln_os}\n"
        f"          kiln_arch: {kiln_arch}\n"
        "          ansible_connection: local\n"
        "          ansible_become: false\n"
        f"          ansible_python_interpreter: {sys.executable}\n"
        "          preflight_check_gpus: false\n"
    )
    env = {**os.environ, "KILN_HOME": str(tmp_path / "home")}
    provision = subprocess.run(
        [
            KILN,
            "provision",
            str(inventory),
            "--stages",
            "preflight",
            "--limit",
            "localhost",
            "--yes",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert provision.returncode == 0, provision.stderr[-3000:]
    facts = subprocess.run(
        [KILN, "facts", str(inventory), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return json.loads(provision.stdout), json.loads(facts.stdout)["hosts"]["localhost"]
