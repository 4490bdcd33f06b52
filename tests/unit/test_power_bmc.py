"""kiln.power.bmc: boards recognised from their BMC's own data; unknown boards refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.power import UnknownBoard, fan_plan, identify, select_adapter
from kiln.power.bmc import DELL, SUPERMICRO

FIXTURES = Path(__file__).parents[1] / "fixtures" / "power"
REAL, DERIVED = FIXTURES / "real", FIXTURES / "derived"


def _read(path: Path) -> str:
    return path.read_text()


DELL_MC = _read(REAL / "mc_info_dell_r730_idrac8.txt")
DELL_FRU = _read(DERIVED / "fru_print_dell_poweredge_xe8545.txt")  # derived: see SOURCE.txt
SMC_MC = _read(REAL / "mc_info_supermicro_x11.txt")
SMC_FRU = _read(REAL / "fru_print_supermicro_x11dpt_b.txt")
HP_MC = _read(shared_capture("ipmitool/mc_info_hp_proliant_ilo.txt"))
HP_FRU = _read(REAL / "fru_print_hp_proliant_dl360_g7.txt")
IPMITOOL = Path(__file__).parents[1] / "fixtures" / "real" / "ipmitool"
IDRAC9_MC = _read(IPMITOOL / "mc_info_dell_idrac9_fw700_poweredge_r540.txt")
R540_FRU = _read(IPMITOOL / "fru_print_dell_poweredge_r540.txt")


def test_identifies_a_real_supermicro_bmc_whose_model_is_only_in_the_part_number():
    board = identify(SMC_MC, SMC_FRU)
    assert (board.manufacturer_id, board.product_id, board.firmware) == (10876, 2402, "1.64")
    assert (board.board_product, board.board_part_number) == ("NONE", "X11DPT-B")
    assert select_adapter(board) is SUPERMICRO


def test_identifies_a_dell_idrac_from_its_iana_id_product_id_and_fru_model():
    board = identify(DELL_MC, DELL_FRU)
    assert (board.manufacturer_id, board.manufacturer_name, board.product_id) == (
        674, "DELL Inc", 256)  # fmt: skip
    assert select_adapter(board) is DELL


def test_refuses_a_real_hp_ilo_board():
    with pytest.raises(UnknownBoard, match=r"manufacturer 11 \(Hewlett-Packard\).*ProLiant DL360"):
        select_adapter(identify(HP_MC, HP_FRU))


def test_refuses_a_dell_bmc_without_fru_model_data():
    # The real R730 mc info alone says "Unknown (0x100)": vendor known, model not -> refused.
    with pytest.raises(UnknownBoard, match="manufacturer 674"):
        select_adapter(identify(DELL_MC, None))


def test_refuses_supermicro_boards_outside_the_known_generations():
    fru = SMC_FRU.replace("X11DPT-B", "X9DRi-LN4F+")
    with pytest.raises(UnknownBoard):
        select_adapter(identify(SMC_MC, fru))


@pytest.mark.parametrize(
    "fru", ["fru_print_supermicro_x13deg_oad_hgx.txt", "fru_print_supermicro_h13dsg_o_cpu_hgx.txt"]
)
def test_recognises_the_supermicro_hgx_generation_x13_and_h13(fru):
    """Today's HGX H100/H200 systems: X13DEG-OAD (SYS-821GE-TNHR), H13DSG-O-CPU
    (AS -8125GS-TNHR). Derived from the real X11DPT-B FRU (see derived/SOURCE.txt)."""
    board = identify(SMC_MC, _read(DERIVED / fru))
    assert select_adapter(board) is SUPERMICRO
    plan = fan_plan(SMC_MC, _read(DERIVED / fru), "full", current_output=" 00\n")
    assert plan["commands"] == [["raw", "0x30", "0x45", "0x01", "0x01"]]
    assert plan["adapter"] == "Supermicro X10-X13/H11-H13 BMC"


def test_refuses_the_next_supermicro_generation_by_name():
    """X14/H14 changed their fan control (smfc issue #98): refused, the board named."""
    plan = fan_plan(SMC_MC, _read(DERIVED / "fru_print_supermicro_h14shm.txt"), "full")
    assert plan["commands"] == [] and plan["adapter"] is None
    assert plan["refused"].startswith(
        "unknown board (manufacturer 10876 (Supermicro), BMC product id 2402, H14SHM)"
    )


def test_recognises_a_real_dell_idrac9_poweredge():
    board = identify(IDRAC9_MC, R540_FRU)
    assert (board.manufacturer_id, board.product_id, board.firmware) == (674, 256, "7.00")
    assert (board.product_name, board.board_product) == ("PowerEdge R540", "PowerEdge R540")
    assert select_adapter(board) is DELL


@pytest.mark.parametrize(
    "mc, fru",
    [
        ("idrac9", "fru_print_dell_poweredge_xe9680.txt"),
        ("idrac8", "fru_print_dell_poweredge_xe8545.txt"),
    ],
)
def test_recognises_the_dell_xe_gpu_servers(mc, fru):
    board = identify(IDRAC9_MC if mc == "idrac9" else DELL_MC, _read(DERIVED / fru))
    assert select_adapter(board) is DELL
    assert "PowerEdge XE" in board.describe()


def test_a_dell_board_named_only_xe9680_is_recognised():
    fru = R540_FRU.replace("PowerEdge R540", "XE9680        ")
    assert select_adapter(identify(IDRAC9_MC, fru)) is DELL


def test_supermicro_plan_reads_the_mode_back_and_sets_only_a_different_one():
    plan = fan_plan(SMC_MC, SMC_FRU, "heavy-io", current_output=" 00\n")
    assert plan["read_command"] == ["raw", "0x30", "0x45", "0x00"]
    assert (plan["current"], plan["changed"], plan["refused"]) == ("standard", True, None)
    assert plan["commands"] == [["raw", "0x30", "0x45", "0x01", "0x04"]]
    again = fan_plan(SMC_MC, SMC_FRU, "heavy-io", current_output=" 04\n")
    assert (again["changed"], again["commands"]) == (False, [])


def test_dell_full_takes_manual_control_at_100_percent_and_keeps_state_itself():
    plan = fan_plan(DELL_MC, DELL_FRU, "full", last_applied=None)
    assert plan["read_command"] is None
    assert plan["commands"] == [
        ["raw", "0x30", "0x30", "0x01", "0x00"],
        ["raw", "0x30", "0x30", "0x02", "0xff", "0x64"],
    ]
    assert fan_plan(DELL_MC, DELL_FRU, "full", last_applied="full\n")["commands"] == []


def test_dell_has_no_heavy_io_command_and_says_so():
    plan = fan_plan(DELL_MC, DELL_FRU, "heavy-io")
    assert plan["commands"] == []
    assert "no documented command for fan profile 'heavy-io'" in plan["refused"]


def test_unknown_board_plan_is_refused_with_nothing_to_send():
    plan = fan_plan(HP_MC, HP_FRU, "full")
    assert plan["commands"] == [] and plan["adapter"] is None
    assert plan["refused"].startswith("unknown board (manufacturer 11 (Hewlett-Packard)")
    assert "no raw IPMI command is sent" in plan["refused"]
