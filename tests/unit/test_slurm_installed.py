"""The Slurm a node runs against the declared one (#28): what `slurmd -V` must say, and how
preflight judges the daemons installed (kiln.profiles.slurm.installed and the preflight role's
kiln_slurm_installed filter), read from real `-V` outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kiln.profiles.slurm import (
    expected_version,
    installed,
    installed_filter,
    matches,
    parse_version_output,
    upgrade_steps,
    upgrade_window,
)

ROOT = Path(__file__).parent.parent.parent
REAL = ROOT / "tests" / "fixtures" / "real" / "slurm-version"
DEBIAN_12 = (REAL / "slurmd-V_debian12_22.05.8.txt").read_text()
DEBIAN_13 = (REAL / "slurmd-V_debian13_24.11.5.txt").read_text()
CTLD_13 = (REAL / "slurmctld-V_debian13_24.11.5.txt").read_text()
PREFLIGHT = ROOT / "playbooks" / "roles" / "preflight"


@pytest.mark.parametrize(
    ("text", "version"),
    [(DEBIAN_12, "22.05.8"), (DEBIAN_13, "24.11.5"), (CTLD_13, "24.11.5"), ("", None),
     ("slurmd: error: something\n", None)],
)  # fmt: skip
def test_the_version_is_read_from_real_outputs(text, version):
    assert parse_version_output(text) == version


def test_what_a_node_must_run():
    assert expected_version("22.05", "distribution", "debian-12") == "22.05"
    assert expected_version("24.05.8", "repository", "debian-12") == "24.05.8"
    # Unset: what the platform ships, exactly (the version the roles install and hold).
    assert expected_version(None, "distribution", "debian-12") == "22.05.8"
    assert expected_version(None, "distribution", "debian-13") == "24.11.5"
    assert expected_version(None, "distribution", "plan9") is None
    assert matches("22.05", "22.05.8") and matches("22.05.8", "22.05.8")
    assert not matches("22.05.8", "22.05.7") and not matches("24.11", "22.05.8")
    assert matches("23.11", "23.11.0-0rc1") and not matches("22.05", None)


def test_the_declared_slurm_installed_is_fine_and_none_installed_is_fine():
    judged = installed({"slurmd": DEBIAN_12}, "22.05", "distribution", "debian-12")
    assert judged.seen == {"slurmd": "22.05.8"} and judged.notes == judged.problems == []
    nothing = installed({}, "22.05", "distribution", "debian-12")
    assert nothing.seen == {} and nothing.notes == nothing.problems == []


def test_an_older_slurm_within_the_window_is_noted_for_the_slurm_stage_to_replace():
    judged = installed({"slurmd": DEBIAN_12}, "23.02", "repository", "debian-12")
    assert judged.problems == []
    assert judged.notes == [
        "slurmd -V says 22.05.8, but Slurm 23.02 is declared: the slurm stage replaces it "
        "with 23.02"
    ]


def test_an_upgrade_beyond_slurm_s_window_stops_the_node_naming_the_steps():
    """Debian 12's 22.05.8 (a real -V) under a declared 24.11: 24.11 upgrades from 23.02,
    23.11 or 24.05 only (its release notes), so the node stops with the way through."""
    judged = installed({"slurmd": DEBIAN_12}, "24.11", "distribution", "debian-13")
    assert judged.notes == []
    assert judged.problems == [
        "slurmd -V says 22.05.8, but Slurm 24.11 is declared: Slurm 24.11 upgrades in place "
        "from 23.02, 23.11, 24.05 only, and 22.05 is further back (its state and accounting "
        "database would be lost); upgrade through 23.11 first: declare 23.11, provision, and "
        "go on"
    ]


@pytest.mark.parametrize(
    ("release", "window"),
    [("22.05", ["20.11", "21.08"]),  # 22.05's RELEASE_NOTES: "from version 20.11 or 21.08"
     ("24.11", ["23.02", "23.11", "24.05"]),  # 24.11's: "from version 23.02, 23.11 or 24.05"
     ("25.11", ["24.05", "24.11", "25.05"]),  # upgrades.html: 25.11 takes 24.05 and later
     ("26.05", ["24.11", "25.05", "25.11"]),  # the same rule: the sandbox's upgrade test
     ("26.11", [])],  # a release kiln's table does not know yet: no guess
)  # fmt: skip
def test_slurm_s_compatibility_window_as_its_release_notes_say(release, window):
    assert upgrade_window(release) == window


def test_the_steps_through_the_window_take_the_furthest_release_each_time():
    assert upgrade_steps("23.11.4", "24.11.5") == []  # Ubuntu 24.04's to Debian 13's: one step
    assert upgrade_steps("22.05.8", "24.11") == ["23.11"]
    assert upgrade_steps("21.08.5", "25.11") == ["23.02", "24.11"]  # Ubuntu 22.04's
    assert upgrade_steps("19.05", "24.11") is None


def test_a_newer_slurm_stops_the_node_since_slurm_does_not_downgrade():
    judged = installed({"slurmctld": CTLD_13}, None, "distribution", "debian-12")
    assert judged.notes == []
    assert judged.problems == [
        "slurmctld -V says 24.11.5, but debian-12 ships Slurm 22.05.8 (kiln_versions.slurm is "
        "not set): the slurm stage would downgrade it to 22.05.8, which Slurm does not support; "
        "declare the installed version, or remove it by hand"
    ]
    # An exact declaration compares the patch level too: 24.11.5 is newer than 24.11.4.
    exact = installed({"slurmd": DEBIAN_13}, "24.11.4", "repository", "debian-13")
    assert len(exact.problems) == 1 and "downgrade it to 24.11.4" in exact.problems[0]


def test_the_filter_reads_the_role_lines():
    """The preflight task prints `DAEMON<TAB>its -V output` for each installed daemon."""
    lines = f"slurmd\t{DEBIAN_12}slurmctld\t{CTLD_13}"
    found = installed_filter(lines, 22.05, "distribution", "debian-12")
    assert found["seen"] == {"slurmd": "22.05.8", "slurmctld": "24.11.5"}
    assert found["expected"] == "22.05" and found["installs"] == "22.05.8"
    assert [p.split(":")[0] for p in found["problems"]] == [
        "slurmctld -V says 24.11.5, but Slurm 22.05 is declared"
    ]
    assert installed_filter("", None, None, None)["seen"] == {}


def test_the_preflight_role_reads_both_daemons_and_fails_only_on_a_downgrade():
    tasks = yaml.safe_load((PREFLIGHT / "tasks" / "main.yml").read_text())
    by_name = {task["name"]: task for task in tasks}
    read = by_name["Read the installed Slurm daemons' versions (slurmd -V, slurmctld -V)"]
    assert "for daemon in slurmd slurmctld" in read["ansible.builtin.shell"]["cmd"]
    assert read["changed_when"] is False and read["check_mode"] is False
    facts = by_name["Assemble the facts of this node"]["ansible.builtin.set_fact"]
    assert "kiln_slurm_installed" in facts["__preflight_facts"]["slurm"]
    compare = by_name["Compare the node with what the inventory declares"]
    assert ".problems" in compare["ansible.builtin.set_fact"]["__preflight_problems"]
    note = by_name["Say which installed Slurm the slurm stage replaces"]
    assert "notes" in note["ansible.builtin.debug"]["msg"]
    defaults = yaml.safe_load((PREFLIGHT / "defaults" / "main.yml").read_text())
    assert defaults["preflight_check_slurm"] is True


def test_kiln_facts_shows_the_slurm_installed_and_the_declared_one_where_it_differs():
    from kiln.commands.facts import _slurm

    same = installed_filter(f"slurmd\t{DEBIAN_12}", "22.05", "distribution", "debian-12")
    older = installed_filter(f"slurmd\t{DEBIAN_12}", "24.11", "distribution", "debian-13")
    assert _slurm({"slurm": same}) == "slurmd 22.05.8"
    assert _slurm({"slurm": older}) == "slurmd 22.05.8 (declared 24.11)"
    assert _slurm({"slurm": None}) == _slurm({}) == "-"
