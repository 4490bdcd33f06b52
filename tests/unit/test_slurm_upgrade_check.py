"""slurm_common's upgrade_check through real ansible-playbook over the local host (#31): what a
host's Slurm daemons say (a `slurmd` stand-in on PATH replaying the real Debian 13 `slurmd -V`),
judged against the declared Slurm, and the SPANK plugins plugstack.conf loads: one a package
provides is upgraded with Slurm, one no package provides refuses the upgrade before anything
changes. Nothing is installed or started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local_playbook import run_playbook

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
SLURMD_V = ROOT / "tests" / "fixtures" / "real" / "slurm-version" / "slurmd-V_debian13_24.11.5.txt"
REPOSITORY = {
    "source": "repository",
    "repository": {"url": "http://repo.example/", "key_url": "http://repo.example/key.asc"},
}


def check(tmp_path: Path, plugstack: str | None, declared: str = "26.05.5"):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    slurmd = bin_dir / "slurmd"
    slurmd.write_text(f"#!/bin/sh\ncat {SLURMD_V}\n")
    slurmd.chmod(0o755)
    config = tmp_path / "etc"
    config.mkdir()
    (config / "slurm.conf").write_text("PluginDir=/usr/lib/x86_64-linux-gnu/slurm-wlm\n")
    if plugstack is not None:
        (config / "plugstack.conf").write_text(plugstack)
    book = tmp_path / "play.yml"
    book.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: true\n  gather_subset: [min]\n"
        "  tasks:\n"
        "    - ansible.builtin.include_role: {name: slurm_common, tasks_from: upgrade_check}\n"
        "    - ansible.builtin.copy:\n"
        "        content: '{{ slurm_common_upgrade | to_json }}'\n"
        f"        dest: {tmp_path / 'upgrade.json'}\n"
        "        mode: '0644'\n"
    )
    extra = {
        "kiln_versions": {"slurm": declared},
        "kiln_slurm": REPOSITORY,
        "kiln_os": "debian-13",
        "slurm_common_config_dir": str(config),
    }
    proc = run_playbook(book, extra, bin_dir)
    found = tmp_path / "upgrade.json"
    return proc, json.loads(found.read_text()) if found.exists() else None


def test_an_older_slurmd_upgrades_with_the_packaged_spank_plugin(tmp_path):
    proc, upgrade = check(tmp_path, "required /bin/bash\n# optional commented.so\n")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert upgrade["from"] == "24.11.5" and upgrade["to"] == "26.05.5"
    assert upgrade["spank_packages"] == ["bash"]  # dpkg says /bin/bash is bash's
    assert upgrade["backup_dir"] == "/var/lib/kiln/slurm-upgrade/24.11.5-to-26.05.5"


def test_a_spank_plugin_no_package_provides_refuses_the_upgrade(tmp_path):
    proc, upgrade = check(tmp_path, "optional spank_handmade.so arg=1\n")
    assert proc.returncode != 0 and upgrade is None
    assert "/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_handmade.so" in proc.stdout
    assert "which no package provides" in proc.stdout


def test_the_declared_version_installed_upgrades_nothing(tmp_path):
    proc, upgrade = check(tmp_path, "optional spank_handmade.so\n", declared="24.11.5")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert upgrade == {}


def test_a_jump_beyond_the_window_is_refused_before_anything_changes(tmp_path):
    proc, upgrade = check(tmp_path, None, declared="21.08.5")  # a downgrade, in fact
    assert proc.returncode != 0 and upgrade is None
    assert "downgrade" in proc.stdout
