"""Day-to-day fleet operations over SSH: select nodes, run one command on many, fold the answers.

    nodes = select_nodes(cluster, "gpu[001-040],!gpu013")
    result = run_command(nodes, "nvidia-smi -L", fanout=64, timeout=30, on_result=progress)
    folds, problems = fold_results(result.results)

The core never prints; `kiln.commands.exec_` renders.
"""

from __future__ import annotations

from kiln.fleet.connect import Connector
from kiln.fleet.execute import CommandOutcome, ExecResult, NodeResult, run_command
from kiln.fleet.fold import Fold, Problem, fold_results, render_text, summary
from kiln.fleet.root import as_root, run_as_root
from kiln.fleet.selectors import select_nodes
from kiln.fleet.ssh import SshSettings, settings_for

__all__ = [
    "Connector",
    "ExecResult",
    "Fold",
    "NodeResult",
    "Problem",
    "SshSettings",
    "CommandOutcome",
    "as_root",
    "fold_results",
    "render_text",
    "run_as_root",
    "run_command",
    "select_nodes",
    "settings_for",
    "summary",
]
