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


def judge_hosts(tmp_path: Path, declared: dict[str, str]):
    """upgrade_check over local hosts, each declaring its own Slurm, and `charlie`, whose sshd
    does not answer (port 9 on this machine: refused): (ansible-playbook, host -> upgrade)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "slurmd").write_text(f"#!/bin/sh\ncat {SLURMD_V}\n")
    (bin_dir / "slurmd").chmod(0o755)
    (tmp_path / "slurm.conf").write_text("PluginDir=/usr/lib/x86_64-linux-gnu/slurm-wlm\n")
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(
        "".join(f"{name} ansible_connection=local declared={v}\n" for name, v in declared.items())
        + "charlie ansible_host=127.0.0.1 ansible_port=9 ansible_connection=ssh\n"
    )
    book = tmp_path / "play.yml"
    book.write_text(
        "- hosts: all\n  gather_facts: true\n  gather_subset: [min]\n"
        "  vars:\n    kiln_versions: {slurm: \"{{ declared | default('24.11.5') }}\"}\n"
        "  tasks:\n"
        "    - ansible.builtin.include_role: {name: slurm_common, tasks_from: upgrade_check}\n"
        "    - ansible.builtin.copy:\n"
        "        content: '{{ slurm_common_upgrade | to_json }}'\n"
        f'        dest: "{tmp_path}/{{{{ inventory_hostname }}}}.json"\n'
        "        mode: '0644'\n"
    )
    extra = {"kiln_slurm": REPOSITORY, "kiln_os": "debian-13",
             "slurm_common_config_dir": str(tmp_path)}  # fmt: skip
    proc = run_playbook(book, extra, bin_dir, inventory=str(hosts))
    found = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    return proc, found


def test_an_unreachable_host_stops_only_itself(tmp_path):
    """A hung node in the judging play used to stop every host of its shard (any_errors_fatal),
    which were then recorded ok without Slurm: the fleet-scale rehearsal found it."""
    proc, found = judge_hosts(tmp_path, {"alpha": "26.05.5", "bravo": "24.11.5"})
    assert "charlie" in proc.stdout and "unreachable=1" in proc.stdout, proc.stdout[-3000:]
    assert found["alpha"]["from"] == "24.11.5" and found["alpha"]["to"] == "26.05.5"
    assert found["bravo"] == {}


def test_one_host_refusing_stops_every_host_that_answered(tmp_path):
    proc, found = judge_hosts(tmp_path, {"alpha": "21.08.5", "bravo": "24.11.5"})
    assert proc.returncode != 0 and found == {}, proc.stdout[-3000:]
    for host in ("alpha", "bravo"):  # both fail, each naming the host that refused
        assert f"fatal: [{host}]" in proc.stdout and "alpha: " in proc.stdout
    assert "downgrade" in proc.stdout
