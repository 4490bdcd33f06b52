"""The campaign's cleanup: an interrupt cancels, restores kiln's drains, deletes the reservation."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.burnin import campaign as C
from kiln.burnin.model import BurninReport
from kiln.burnin.suites import resolve_suite
from kiln.inventory import require_valid

SANDBOX = Path(__file__).resolve().parents[2] / "inventories" / "sandbox"


class FakeController:
    def __init__(self, fail_on: str) -> None:
        self.commands: list[str] = []
        self.fail_on = fail_on

    def run(self, command: str, *, timeout: float = 60, check: bool = True) -> str:
        self.commands.append(command.splitlines()[0])
        if command.startswith(self.fail_on):
            raise KeyboardInterrupt
        return "17\n" if command.startswith("sbatch") else ""


@pytest.mark.parametrize("fail_on", ["sbatch", "squeue"])
def test_interrupt_restores_drains_and_deletes_the_reservation(tmp_path, fail_on):
    cluster = require_valid(SANDBOX)
    nodes = [n.name for n in cluster.compute]
    outcome = C.BurninOutcome(
        "RUN", tmp_path, resolve_suite(cluster.burnin), nodes, BurninReport(cluster.name)
    )
    ctl = FakeController(fail_on)
    drained = {nodes[0]: "kiln: quarantined until burn-in passes"}
    campaign = C._Campaign(cluster, C.BurninOptions(), ctl, outcome, lambda _: None, drained)
    with pytest.raises(KeyboardInterrupt):
        campaign.run()
    res = "kiln-burnin-run"
    assert ctl.commands[0].startswith(f"scontrol create reservation reservationname={res} ")
    assert ctl.commands[1] == f"scontrol update nodename={nodes[0]} state=resume"
    tail = ctl.commands[-2:]
    assert tail == [
        f"scontrol update nodename={nodes[0]} state=drain "
        "reason='kiln: quarantined until burn-in passes'",
        f"scontrol delete reservationname={res}",
    ]
    if fail_on == "squeue":  # submitted jobs are cancelled first
        assert any(c.startswith("scancel 17") for c in ctl.commands)
