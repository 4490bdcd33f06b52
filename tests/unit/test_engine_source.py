"""The Ansible side imports the same kiln as the CLI that started it.

The CLI here runs from a copy of the source tree in a temporary directory, while this
environment's installed kiln points at the checkout: without the engine's PYTHONPATH, the
plugins would import the installed copy and this test fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "engine" / "source"

RUN = """
import sys
from pathlib import Path
from kiln.runner import engine
from kiln.runner.events import EventRecorder

work = Path(sys.argv[1])
inventory = work / "hosts.ini"
inventory.write_text("localhost ansible_connection=local ansible_python_interpreter=%s\\n"
                     % sys.executable)
request = engine.PlaybookRequest(
    playbook=work / "play" / "report_source.yml",
    inventory=inventory,
    private_data_dir=work / "pdd",
    ident="source",
    fact_cache=work / "facts",
    extravars={"report_file": str(work / "report.json")},
)
result = engine.run_playbook(request, EventRecorder("source"), ["localhost"])
print(result.status)
"""


def test_filter_and_strategy_plugins_import_the_clis_own_kiln(tmp_path):
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "cli" / "kiln", checkout / "cli" / "kiln",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    for data in ("playbooks", "templates"):
        (checkout / data).symlink_to(ROOT / data)
    shutil.copytree(FIXTURE, tmp_path / "play")
    env = {**os.environ, "PYTHONPATH": str(checkout / "cli"), "KILN_MITOGEN": "0"}
    env.pop("KILN_BATCH_WORKERS", None)
    proc = subprocess.run(
        [sys.executable, "-c", RUN, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout.strip().endswith("successful"), proc.stdout + proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    copy = checkout / "cli" / "kiln"
    assert Path(report["kiln"]) == copy / "__init__.py"
    assert Path(report["strategy"]) == copy / "strategy" / "batching.py"
