"""Real ansible-playbook over the local host with kiln's roles and filters, for `local` tests:
extra vars as JSON, an optional directory of stand-in commands put first on PATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"


def run_playbook(
    book: Path, extra: dict, bin_dir: Path | None = None, inventory: str = "localhost,"
) -> subprocess.CompletedProcess:
    """`inventory`: ansible-playbook's -i (a host list, or the path of an inventory file)."""
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(PLAYBOOKS / "filter_plugins"),
        "PATH": f"{bin_dir}:{os.environ['PATH']}" if bin_dir else os.environ["PATH"],
    }
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory, str(book),
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", json.dumps(extra)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
