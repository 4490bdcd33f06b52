"""The cluster's state document (state.json on the controller): what it holds and how a run or a
burn-in updates it. Pure: no I/O.

    {
      "schema": 1,
      "cluster": "gpu-a",
      "last_run": {"id": ..., "result": "ok|failed|interrupted", "finished": ..., "by": "u@host"},
      "nodes": {
        "gpu0001": {
          "joined": "2026-11-30T10:02:11+00:00",     first run that took it through every stage
          "last_run": "20261130T100000Z-3f9a1c",
          "last_result": "ok|changed|failed|unreachable|aborted|not_run",
          "last_run_at": "...",
          "stages": {"base": "ok", "slurm": "changed"},
          "versions": {"driver_branch": 570, "cuda": "12.8", "nccl": "2.26.5", "slurm": "24.11"},
          "verdict": {"result": "pass", "run": "...", "at": "..."}
        }
      }
    }
"""

from __future__ import annotations

from typing import Any

from kiln.records.status import GOOD, worst

SCHEMA = 1


def joined_nodes(state: dict[str, Any]) -> set[str]:
    """Nodes the state records as joined."""
    nodes = state.get("nodes") if isinstance(state, dict) else None
    if not isinstance(nodes, dict):
        return set()
    return {name for name, node in nodes.items() if isinstance(node, dict) and node.get("joined")}


def run_patch(
    summary: dict[str, Any],
    versions: dict[str, Any],
    by: str,
    cluster: str,
    members: list[str] | None = None,
) -> dict[str, Any] | None:
    """The update a provision run's summary makes (None for a check run: it changed nothing).

    A node joins when the run took it through every stage it ran (the refresh of the cluster-wide
    files aside), each ending ok or changed: the rule local records follow
    (kiln.records.runs.provisioned_hosts). Versions are recorded for such nodes only. With
    `members` (every host the inventory lists), nodes the inventory dropped are forgotten: a
    node that left the cluster and comes back is new again, quarantined until burn-in passes.
    """
    if summary.get("check"):
        return None
    finished = summary.get("finished") or summary.get("started")
    ran = [
        e["name"]
        for e in summary.get("stages", [])
        if e.get("status") != "skipped" and e.get("name") != "refresh"
    ]
    nodes: dict[str, dict[str, Any]] = {}
    for host, statuses in (summary.get("hosts") or {}).items():
        if not statuses:
            continue
        entry: dict[str, Any] = {
            "last_run": summary.get("run_id"),
            "last_result": worst(statuses.values()),
            "last_run_at": finished,
            "stages": dict(statuses),
        }
        if ran and all(statuses.get(name) in GOOD for name in ran):
            entry["joined"] = finished
            entry["versions"] = dict(versions)
        nodes[host] = entry
    code = summary.get("exit_code", 1)
    result = "ok" if code == 0 else "interrupted" if code == 130 else "failed"
    patch = {
        "schema": SCHEMA,
        "cluster": cluster,
        "last_run": {"id": summary.get("run_id"), "result": result, "finished": finished, "by": by},
        "nodes": nodes,
    }
    if members is not None:
        patch["members"] = sorted(members)
    return patch


def verdict_patch(verdicts: dict[str, str], run_id: str, at: str) -> dict[str, Any]:
    """The update a judged burn-in makes: each node's verdict (pass, fail, ...)."""
    return {
        "schema": SCHEMA,
        "nodes": {
            node: {"verdict": {"result": result, "run": run_id, "at": at}}
            for node, result in verdicts.items()
        },
    }
