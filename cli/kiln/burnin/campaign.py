"""A burn-in campaign through Slurm: submit, collect, judge, set node states (no printing).

    target = select_target(cluster, BurninOptions(suite="quick"))   # checks, touches nothing
    outcome = run_burnin(cluster, target, options, progress=callback)

`kiln burnin` (kiln.commands.burnin) installs the runtime (the `burnin` stage) on the target's
nodes first and renders the report after; the campaign in between:

1. Isolation: a maintenance reservation over the selected nodes (`flags=maint,ignore_jobs`,
   `users=root`): no production job starts on them while it exists, and jobs already running
   are never touched (ours queue behind them, `--exclusive`). Nodes that kiln drained earlier
   (their reason is kiln's: quarantine or a failed burn-in) are resumed INSIDE the reservation,
   so they run burn-in but still take no production work. Nodes drained or down for any other
   reason are left alone and skipped (kiln.burnin.nodes).
2. The jobs (kiln.burnin.jobs, submitted through kiln.slurmctl): a node array, the fabric
   all-reduce, on nodes that declare HCAs ib_write_bw per rail between node pairs
   (kiln.burnin.ib: their HCAs read over SSH before and after, for the names, the port states
   and the error counters), and, when the fabric misses its floor, the pairwise pass; polled
   with squeue, cancelled at their deadline.
3. Results fetched over SSH from every node into the run record (kiln.burnin.collect), judged
   (kiln.judging through judge_run), report.json saved.
4. Node states: failing nodes drained with their reason ("kiln: gemm ..."); passing nodes kiln
   had drained stay resumed; `drain=False` puts every node back as it was. Then the
   reservation goes. On an error or Ctrl-C the jobs are cancelled, the drains kiln lifted are
   restored and the reservation is deleted before the exception propagates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.burnin import ib as IB
from kiln.burnin import jobs as J
from kiln.burnin.collect import collect, read_hcas
from kiln.burnin.judge import judge_run
from kiln.burnin.nodes import classify, select_compute
from kiln.burnin.suites import Suite, resolve_suite
from kiln.errors import EnvironmentProblem, InvalidInputError, OperationFailed
from kiln.fabric.links import parse_sysfs_dump
from kiln.inventory import Cluster
from kiln.judging import BurninReport, floors_for
from kiln.judging.ib import IbPair
from kiln.judging.pairs import pair_schedule
from kiln.judging.results import ResultError, allreduce_from_doc
from kiln.parsers import ParseError
from kiln.profiles import get_profile
from kiln.records.burnin import RunLayout, manifest_entry, save_report, write_manifest
from kiln.records.runs import RunRecord, state_dir
from kiln.slurmctl import commands
from kiln.slurmctl.remote import Controller

Progress = Callable[[str], None]


@dataclass
class BurninOptions:
    suite: str | None = None  # None: the inventory's kiln_burnin.suite
    nodes: str | None = None  # a --nodes selector; None: every compute node
    hours: float | None = None  # soak duration
    gemm_seconds: float | None = None  # override the suite's GEMM duration
    drain: bool = True  # drain failing nodes, keep passing ones resumed
    paths: J.Paths = field(default_factory=J.Paths)
    poll_seconds: float = 3.0


@dataclass(frozen=True)
class Target:
    """What a burn-in will run: the suite and the selected compute nodes, before Slurm is asked."""

    suite: Suite
    nodes: list[str]


@dataclass
class BurninOutcome:
    run_id: str
    run_dir: Path
    suite: Suite
    nodes: list[str]
    report: BurninReport
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why it was not tested
    drained: dict[str, str] = field(default_factory=dict)  # node -> reason kiln set
    resumed: list[str] = field(default_factory=list)  # kiln-drained nodes now in service
    jobs: dict[str, str] = field(default_factory=dict)  # kiln job name -> Slurm job id
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "record": str(self.run_dir),
            "suite": self.suite.to_dict(),
            "nodes": self.nodes,
            "skipped": self.skipped,
            "drained": self.drained,
            "resumed": self.resumed,
            "jobs": self.jobs,
            "timings": {k: round(v, 1) for k, v in self.timings.items()},
            "passed": self.report.passed,
            "report": self.report.to_dict(),
        }


def select_target(cluster: Cluster, options: BurninOptions) -> Target:
    """The suite and nodes to run; InvalidInputError before anything is touched."""
    if not cluster.controllers:
        raise InvalidInputError("the inventory has no controller (kiln_controllers)")
    suite = resolve_suite(
        cluster.burnin, options.suite, hours=options.hours, gemm_seconds=options.gemm_seconds
    )
    return Target(suite, [n.name for n in select_compute(cluster, options.nodes)])


def run_burnin(
    cluster: Cluster,
    target: Target,
    options: BurninOptions,
    *,
    progress: Progress = lambda _: None,
) -> BurninOutcome:
    """Run the target's nodes that Slurm lets run; the outcome holds the judged report."""
    controller = Controller(cluster, root=True)
    try:
        states = controller.show(target.nodes)
    except ParseError as exc:
        raise EnvironmentProblem(f"cannot read the Slurm node states: {exc}") from None
    usable, kiln_drained, skipped = classify(states, target.nodes)
    for name, why in skipped.items():
        progress(f"skipping {name}: {why}")
    if not usable:
        raise OperationFailed("no selected node can run burn-in", hint="see the skipped nodes")
    record = RunRecord.create(state_dir())
    outcome = BurninOutcome(
        record.run_id, record.path, target.suite, usable, BurninReport(cluster.name),
        skipped=skipped,
    )  # fmt: skip
    _Campaign(cluster, options, controller, outcome, progress, kiln_drained).run()
    return outcome


class _Campaign:
    def __init__(self, cluster, options, controller, outcome, progress, kiln_drained) -> None:
        self.cluster: Cluster = cluster
        self.options: BurninOptions = options
        self.ctl: Controller = controller
        self.out: BurninOutcome = outcome
        self.progress: Progress = progress
        self.kiln_drained: dict[str, str] = kiln_drained
        self.resumed: list[str] = []
        self.active: list[str] = []
        self.layout = RunLayout(outcome.run_dir)
        self.reservation = J.reservation_name(outcome.run_id)
        self.nodes = {n: cluster.node(n) for n in outcome.nodes}
        self.ib_nodes = [n for n in outcome.nodes if self.nodes[n].ib_hcas]
        self.ib_pairs: list[IbPair] = []

    # -- the phases ---------------------------------------------------------------------
    def run(self) -> None:
        out, suite = self.out, self.out.suite
        groups: dict[int, list[str]] = {}
        for name, node in self.nodes.items():
            groups.setdefault(node.gpu_count if node.has_gpus else 0, []).append(name)
        specs = []
        for gpus, members in sorted(groups.items()):
            others = [n for n in out.nodes if n not in members]
            specs.append(
                J.node_array(
                    out.run_id, self.reservation, suite, members, gpus=gpus, exclude=others,
                    paths=self.options.paths,
                )
            )  # fmt: skip
            if len(members) >= 2:
                name = "fabric-ring" if len(groups) == 1 else f"fabric-ring-g{gpus}"
                specs.append(self._allreduce(name, members, gpus))
        ib_rounds = self._ib_plan()
        for k, pairs in enumerate(ib_rounds):
            specs.append(
                J.ib_round_job(
                    out.run_id, self.reservation, suite, k, pairs, paths=self.options.paths
                )
            )
        self._manifest(specs)
        # The reservation lasts the expected phases plus margin; it is deleted at the end.
        minutes = suite.time_limit_minutes * 4 + 10
        self.ctl.run([commands.create_reservation(self.reservation, out.nodes, minutes)])
        self.progress(f"reservation {self.reservation} on {len(out.nodes)} node(s)")
        finished = False
        try:
            for name in self.kiln_drained:
                self.ctl.run([commands.resume([name])])
                self.resumed.append(name)
            t0 = time.monotonic()
            phases = "node GEMM, fabric all-reduce" + (", InfiniBand rails" if ib_rounds else "")
            self._submit_and_wait(specs, phases)
            self._collect()
            out.timings["jobs"] = time.monotonic() - t0
            pairs = self._pair_specs(groups)
            if pairs:
                specs += pairs
                self._manifest(specs)
                t0 = time.monotonic()
                self._submit_and_wait(pairs, f"pairwise pass: {len(pairs)} node pair(s)")
                self._collect()
                out.timings["pairs"] = time.monotonic() - t0
            self._ib_read("after")
            out.report = judge_run(out.run_dir, self.cluster)
            save_report(out.run_dir, out.report)
            self._apply_states()
            finished = True
        finally:
            self._cleanup(finished)

    def _allreduce(self, name: str, members: list[str], gpus: int) -> J.JobSpec:
        return J.allreduce_job(
            self.out.run_id, self.reservation, self.out.suite, name, members, gpus=gpus,
            paths=self.options.paths,
        )  # fmt: skip

    def _manifest(self, specs: list[J.JobSpec]) -> None:
        write_manifest(
            self.out.run_dir,
            run_id=self.out.run_id,
            suite=self.out.suite.name,
            cluster=self.cluster.name,
            nodes=self.out.nodes,
            allreduce_jobs=[job for spec in specs for job in spec.allreduce_jobs],
            ib=manifest_entry(self.ib_nodes, self.ib_pairs) if self.ib_nodes else None,
        )

    def _ib_plan(self) -> list[list[IbPair]]:
        """Read the HCAs of the nodes that declare them and pair those nodes for ib_write_bw."""
        if not self.ib_nodes:
            self.progress("InfiniBand: no node declares HCAs (kiln_ib_hcas); rail checks skipped")
            return []
        dumps = self._ib_read("before")
        rounds = IB.plan_rounds(
            {n: self.nodes[n].ib_hcas for n in self.ib_nodes},
            {n: parse_sysfs_dump(text) for n, text in dumps.items()},
            link_rate_gbps=self.cluster.ib.link_rate_gbps,
        )
        self.ib_pairs = [pair for round_ in rounds for pair in round_]
        self.progress(
            f"InfiniBand: {len(self.ib_nodes)} node(s) with HCAs, {len(self.ib_pairs)} "
            f"ib_write_bw pair(s) in {len(rounds)} round(s)"
        )
        return rounds

    def _ib_read(self, phase: str) -> dict[str, str]:
        if not self.ib_nodes:
            return {}
        hca_nodes = [self.nodes[n] for n in self.ib_nodes]
        return read_hcas(hca_nodes, self.layout, phase, self.progress)

    def _collect(self) -> None:
        nodes = list(self.nodes.values())
        collect(nodes, self.options.paths, self.out.run_id, self.layout, self.progress)

    def _submit_and_wait(self, specs: list[J.JobSpec], what: str) -> None:
        ids = []
        for spec in specs:
            job_id = self.ctl.submit(spec.script, spec.name)
            self.out.jobs[spec.name] = job_id
            self.active.append(job_id)
            ids.append(job_id)
        self.progress(f"{what}: Slurm job(s) {', '.join(ids)}")
        limit = self.out.suite.time_limit_minutes * 60
        queued = 60 * sum(spec.queued_minutes for spec in specs)
        # Queueing behind running jobs, then run; jobs that queue behind ours on the same nodes
        # (the InfiniBand rounds) add their own limit.
        deadline = time.monotonic() + 2 * limit + 60 + queued
        last = ""
        while True:
            text = self._best_effort(commands.squeue(ids))
            states = [line.split("|") for line in text.splitlines() if "|" in line]
            if not states:
                break
            summary = _count_states(states)
            if summary != last:
                self.progress(f"{what}: {summary}")
                last = summary
            if time.monotonic() > deadline:
                self.progress(f"{what}: deadline passed; cancelling {', '.join(ids)}")
                self._best_effort(commands.scancel(ids))
                break
            time.sleep(self.options.poll_seconds)
        self.active = [j for j in self.active if j not in ids]

    def _best_effort(self, argv: Sequence[str]) -> str:
        """Run one Slurm command, its failure ignored (polling and cleanup must go on); stdout."""
        try:
            return self.ctl.run([argv], check=False)[0].stdout
        except OperationFailed:  # the controller did not answer
            return ""

    def _pair_specs(self, groups: dict[int, list[str]]) -> list[J.JobSpec]:
        """Pair jobs for every fabric all-reduce that missed its floor (3 nodes or more)."""
        specs = []
        for gpus, members in sorted(groups.items()):
            if len(members) < 3:
                continue  # two nodes: the fabric job already is the pair
            name = "fabric-ring" if len(groups) == 1 else f"fabric-ring-g{gpus}"
            if not self._fabric_slow(name, members):
                continue
            for k, round_ in enumerate(pair_schedule(members)):
                for a, b in round_:
                    specs.append(self._allreduce(J.pair_name(k, a, b), [a, b], gpus))
        return specs

    def _fabric_slow(self, name: str, members: list[str]) -> bool:
        path = self.layout.allreduce(name)
        floors = [
            floors_for(get_profile(self.nodes[m].gpu_model), self.cluster.burnin) for m in members
        ]
        gbs = [f.allreduce_busbw_gbs for f in floors if f.allreduce_busbw_gbs]
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            result = allreduce_from_doc(name, doc)
        except (OSError, ValueError, ResultError):
            return True  # no result: the pairs tell which nodes or links hang
        slow = not result.correct or (bool(gbs) and result.verdict_busbw_gbs < min(gbs))
        if slow:
            self.progress(f"{name}: {result.verdict_busbw_gbs:g} GB/s below its floor")
        return slow

    def _apply_states(self) -> None:
        drains = self.out.report.drain()
        if not self.options.drain:
            self._restore()
            return
        for node in self.out.nodes:
            reason = drains.get(node)
            if reason is not None:
                self.ctl.run([commands.drain([node], reason)])
                self.out.drained[node] = reason
        self.out.resumed = [n for n in self.resumed if n not in drains]
        self.resumed = []

    def _restore(self) -> None:
        """Put back the drains kiln lifted for the run (interrupted, failed, or --no-drain)."""
        for node in self.resumed:
            self._best_effort(commands.drain([node], self.kiln_drained[node]))
        self.resumed = []

    def _cleanup(self, finished: bool) -> None:
        if self.active:
            self._best_effort(commands.scancel(self.active))
            self.active = []
        if not finished:
            self._restore()
        self._best_effort(commands.delete_reservation(self.reservation))


def _count_states(states: list[list[str]]) -> str:
    counts: dict[str, int] = {}
    for row in states:
        counts[row[1]] = counts.get(row[1], 0) + 1
    return ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))
