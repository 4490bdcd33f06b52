"""A burn-in campaign through Slurm: submit, collect, judge, set node states (no printing).

    target = select_target(cluster, BurninOptions(suite="quick"))   # checks, touches nothing
    outcome = run_burnin(cluster, target, options, progress=callback)

`kiln burnin` (kiln.commands.burnin) installs the runtime (the `burnin` stage) on the target's
nodes first and renders the report after; the campaign in between:

1. Isolation: a maintenance reservation over the selected nodes (`flags=maint,ignore_jobs`,
   `users=root`): no production job starts on them while it exists, and jobs already running
   are never touched. A node such a job holds is busy: it is "not tested (busy)", let out of
   the reservation and never drained (the run is incomplete); with `wait_minutes` kiln first
   polls until the busy nodes are free, then tests them. Nodes drained with a reason the drain
   policy lets burn-in lift (quarantine, a failed burn-in, a failed health check) are tested
   UNDER their drain: each phase's jobs are queued, then a window on the controller lifts the
   drains until the jobs have started and puts each reason back (kiln.slurmctl.cas: detached,
   so a killed kiln cannot leave a node lifted). A job keeps running on a drained node; nothing
   else starts there. Nodes drained or down for any other reason are skipped (kiln.burnin.nodes).
   A reservation an earlier, killed run left is undone first (kiln.slurmctl.leftovers).
2. The jobs (kiln.burnin.jobs, submitted through kiln.slurmctl), in phases that each start at
   once: one job per node pinned to it (a per-node job still pending at the deadline leaves its
   node "not tested (busy)"); the fabric all-reduce; on nodes that declare HCAs, ib_write_bw per
   rail between node pairs, a round at a time (kiln.burnin.ib: their HCAs read over SSH before
   and after, for the names, the port states and the error counters); and, when the fabric
   misses its floor, the pairwise pass in the rounds the Locator picks (kiln.burnin.pairwise:
   at most three, each of disjoint pairs), collected after each; polled with squeue,
   cancelled at their deadline (kiln.burnin.submit).
3. Results fetched over SSH from every node into the run record (kiln.burnin.collect), judged
   (kiln.judging through judge_run), report.json saved.
4. Node states, each a compare-and-set (the node read again; a reason someone else placed
   during the run is kept, named in `kept`): failing nodes drained with kind burnin and this
   run's id ("kiln:burnin:RUN: gemm ..."); passing nodes under a drain burn-in may lift are
   resumed; a node not tested keeps its drain; `drain=False` changes nothing. Then the
   reservation goes. On an error, Ctrl-C or SIGTERM the jobs are cancelled and the reservation
   deleted before the exception propagates: nothing else needs restoring, since no drain was
   ever left lifted.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

from kiln.burnin import ib as IB
from kiln.burnin import jobs as J
from kiln.burnin import pairwise as P
from kiln.burnin.collect import collect, read_hcas
from kiln.burnin.dcgm import dcgm_phase
from kiln.burnin.judge import judge_run
from kiln.burnin.nodes import busy, busy_message, classify, select_compute, wait_for
from kiln.burnin.outcome import BurninOptions, BurninOutcome, Target
from kiln.burnin.pairwise import PairwisePass
from kiln.burnin.states import lift_while_starting, settle
from kiln.burnin.submit import JobQueue
from kiln.burnin.suites import resolve_suite
from kiln.errors import EnvironmentProblem, InvalidInputError, OperationFailed
from kiln.fabric.links import parse_sysfs_dump
from kiln.inventory import Cluster
from kiln.judging import BurninReport
from kiln.judging.ib import IbPair
from kiln.judging.model import NOT_TESTED_BUSY
from kiln.judging.results import AllreduceResult
from kiln.judging.thresholds import FABRIC_BYTES, fabric_floor, floors_for
from kiln.parsers import ParseError
from kiln.profiles import get_profile
from kiln.records.burnin import RunLayout, manifest_entry, save_report, write_manifest
from kiln.records.documents import RunDocuments
from kiln.records.runs import RunRecord, runs_home
from kiln.slurmctl import commands
from kiln.slurmctl import leftovers as L
from kiln.slurmctl.remote import Controller

Progress = Callable[[str], None]
__all__ = ["BurninOptions", "BurninOutcome", "Target", "run_burnin", "select_target"]


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
    cleared = L.leftover_runs(controller)
    for leftover in cleared:
        progress(f"an earlier burn-in did not finish: undoing its {leftover.describe()}")
    L.undo(controller, cleared)
    try:
        states = controller.show(target.nodes)
    except ParseError as exc:
        raise EnvironmentProblem(f"cannot read the Slurm node states: {exc}") from None
    usable, kiln_drained, skipped = classify(states, target.nodes)
    for name, why in skipped.items():
        progress(f"skipping {name}: {why}")
    if not usable:
        raise OperationFailed("no selected node can run burn-in", hint="see the skipped nodes")
    record = RunRecord.create(runs_home())
    outcome = BurninOutcome(
        record.run_id, record.path, target.suite, usable, BurninReport(cluster.name),
        skipped=skipped, cleared=[leftover.describe() for leftover in cleared],
        under_drain=dict(kiln_drained),
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
        self.kiln_drained: dict[str, str] = kiln_drained  # node -> the drain it is tested under
        self.queue = JobQueue(controller, progress, poll_seconds=options.poll_seconds, clock=time)
        self.queue.jobs = outcome.jobs
        self.layout = RunLayout(outcome.run_dir)
        self.documents = RunDocuments(outcome.run_dir)  # read as each pairwise round ends
        self.reservation = J.reservation_name(outcome.run_id)
        self.nodes = {n: cluster.node(n) for n in outcome.nodes}
        self.ib_nodes = [n for n in outcome.nodes if self.nodes[n].ib_hcas]
        self.ib_pairs: list[IbPair] = []
        # a GPU model's floors, as judging reads them (the pairwise pass's threshold)
        self.floors = functools.cache(lambda model: floors_for(get_profile(model), cluster.burnin))
        # kiln_burnin.container: the GEMM and all-reduces run in that image (validate checked it)
        self.container = J.burnin_container(
            cluster.burnin.container, cluster.containers, cluster.mirror.url
        )

    # -- the phases ---------------------------------------------------------------------
    def run(self) -> None:
        out, suite = self.out, self.out.suite
        # The reservation lasts the wait, the expected phases and a margin; deleted at the end.
        minutes = suite.time_limit_minutes * 4 + 10 + math.ceil(self.options.wait_minutes or 0)
        self.ctl.run([commands.create_reservation(self.reservation, out.nodes, minutes)])
        self.progress(f"reservation {self.reservation} on {len(out.nodes)} node(s)")
        try:
            self._set_aside_busy()
            if self.nodes:
                self._jobs()
            else:
                self._manifest([])
            out.report = judge_run(out.run_dir, self.cluster)
            # DCGM diagnostics on the tested GPU nodes, a phase of its own (kiln.burnin.dcgm):
            # its verdicts join the report; a node it could not validate is not tested.
            dcgm_phase(self.nodes.values(), out, self.layout, self.progress)
            out.not_tested = dict(out.report.not_tested)
            save_report(out.run_dir, out.report)
            self._apply_states()
        finally:
            self._cleanup()

    def _set_aside_busy(self) -> None:
        """Nodes that jobs outside the reservation hold: waited for (wait_minutes), else (or
        still busy then) not tested, let out of the reservation, their jobs left alone."""
        out = self.out
        held = busy(self.ctl, out.nodes, self.reservation)
        if held and self.options.wait_minutes:
            held = wait_for(
                self.ctl, held, self.reservation, minutes=self.options.wait_minutes,
                poll_seconds=self.options.poll_seconds * 10, progress=self.progress, clock=time,
            )  # fmt: skip
        if not held:
            return
        for name, jobs in held.items():
            out.not_tested[name] = busy_message(jobs)
            self.progress(f"{name}: {out.not_tested[name]}")
        out.nodes = [n for n in out.nodes if n not in held]
        if out.nodes:  # their work goes on meanwhile; else they stay reserved until the end
            shrink = commands.reservation_nodes(self.reservation, out.nodes)
            (step,) = self.ctl.run([shrink], check=False)
            if step.exit_code != 0:
                self.progress(
                    f"busy nodes stay reserved until the end (scontrol: {step.exit_code})"
                )
        self.nodes = {n: self.nodes[n] for n in out.nodes}
        self.ib_nodes = [n for n in self.ib_nodes if n in self.nodes]

    def _jobs(self) -> None:
        """The per-node jobs, then the fabric all-reduce, the InfiniBand rounds and the pairs if
        needed, each phase's jobs started together; results collected after each. Before each
        later phase, nodes someone drained meanwhile leave the run (their jobs could not start)."""
        out, suite = self.out, self.out.suite
        per_node = [
            J.node_job(out.run_id, self.reservation, suite, name, gpus=gpus,
                       paths=self.options.paths, container=self.container)
            for gpus, members in self._groups().items() for name in members
        ]  # fmt: skip
        self._manifest(per_node)
        t0 = time.monotonic()
        self._not_started(self._wait(per_node, "node GEMM"), per_node)
        self._drop_changed()
        fabric = [
            self._allreduce(self._ring(gpus), members, gpus)
            for gpus, members in self._groups().items()
            if len(members) >= 2
        ]
        specs = per_node + fabric
        self._manifest(specs)
        self._wait(fabric, "fabric all-reduce")
        self._drop_changed()
        domains = self._domain_jobs()
        if domains:
            specs += domains
            self._manifest(specs)
            self._wait(domains, f"NVLink domain all-reduce ({len(domains)} domain(s))")
            self._drop_changed()
        self._ib_rounds(specs)
        self._collect()
        out.timings["jobs"] = time.monotonic() - t0
        t0 = time.monotonic()
        if self._pairwise(specs):
            out.timings["pairs"] = time.monotonic() - t0
        self._manifest(specs)  # with the nodes whose job never started
        self._ib_read("after")

    def _groups(self) -> dict[int, list[str]]:
        """The nodes still in the run by GPU count (0: CPU-only), in order."""
        groups: dict[int, list[str]] = {}
        for name, node in self.nodes.items():
            groups.setdefault(node.gpu_count if node.has_gpus else 0, []).append(name)
        return dict(sorted(groups.items()))

    def _domain_jobs(self) -> list[J.JobSpec]:
        return J.domain_jobs(self.out.run_id, self.reservation, self.out.suite, self.nodes,
                             paths=self.options.paths, container=self.container)  # fmt: skip

    def _ring(self, gpus: int) -> str:
        return "fabric-ring" if len(self._groups()) == 1 else f"fabric-ring-g{gpus}"

    def _drop_changed(self) -> None:
        """Nodes whose drain changed since the run began (an operator or the health check
        drained them): their next jobs could not start, so they leave the run, not tested,
        their new reason kept."""
        try:
            states = self.ctl.show(list(self.nodes))
        except ParseError:
            return  # unread: the window's own compare-and-set still guards each lift
        for name in list(self.nodes):
            state, was = states.get(name), self.kiln_drained.get(name)
            if state is None or (state.reason if state.drained else None) == was:
                continue
            now = f"{state.state}|{state.reason or 'none'}"
            self.out.kept[name] = now
            self.out.not_tested[name] = (
                f"not tested: drained by someone else during the run ({now})"
            )
            self.progress(f"{name}: {self.out.not_tested[name]}")
            self.kiln_drained.pop(name, None)
            del self.nodes[name]
        self.out.nodes = [n for n in self.out.nodes if n in self.nodes]
        self.ib_nodes = [n for n in self.ib_nodes if n in self.nodes]

    def _not_started(self, pending: dict[str, str], specs: list[J.JobSpec]) -> None:
        """Per-node jobs still pending at the deadline: their nodes were busy, not tested."""
        for spec in specs:
            if spec.tests and spec.name in pending:
                job = self.out.jobs[spec.name]
                self.out.not_tested[spec.tests] = (
                    f"{NOT_TESTED_BUSY}: its job {job} never started before the deadline "
                    f"({pending[spec.name]})"
                )
                self.progress(f"{spec.tests}: {self.out.not_tested[spec.tests]}")

    def _allreduce(self, name: str, members: list[str], gpus: int) -> J.JobSpec:
        return J.allreduce_job(
            self.out.run_id, self.reservation, self.out.suite, name, members, gpus=gpus,
            paths=self.options.paths, container=self.container,
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
            not_tested=self.out.not_tested,
            container=self.container.image if self.container else None,
        )

    def _ib_rounds(self, specs: list[J.JobSpec]) -> None:
        """Read the HCAs of the nodes that declare them, then the rounds the Locator picks
        (kiln.burnin.ib.IbPass), a phase each, collected before the next is chosen."""
        if not self.ib_nodes:
            self.progress("InfiniBand: no node declares HCAs (kiln_ib_hcas); rail checks skipped")
            return
        dumps = self._ib_read("before")
        pass_ = IB.IbPass(
            self.cluster, {n: self.nodes[n].ib_hcas for n in self.ib_nodes},
            {n: parse_sysfs_dump(text) for n, text in dumps.items()},
            floor_pct=self.cluster.burnin.ib_write_bw_floor_pct,
        )  # fmt: skip
        self.progress(f"InfiniBand: {len(pass_.rails_of)} node(s) with a rail to test")
        pairs = pass_.first()
        while pairs:
            k, out = pass_.locator.rounds, self.out
            self.ib_pairs += pairs
            spec = J.ib_round_job(out.run_id, self.reservation, out.suite, k, pairs,
                                  paths=self.options.paths)  # fmt: skip
            specs.append(spec)
            self._manifest(specs)
            self._wait([spec], f"InfiniBand rails, round {k + 1} ({len(pairs)} pairs)",
                       spec.queued_minutes)  # fmt: skip
            self._collect([n for pair in pairs for n in (pair.client, pair.server)])
            pass_.record(self.layout, pairs)
            pairs = pass_.next()

    def _ib_read(self, phase: str) -> dict[str, str]:
        if not self.ib_nodes:
            return {}
        hca_nodes = [self.nodes[n] for n in self.ib_nodes]
        return read_hcas(hca_nodes, self.layout, phase, self.progress)

    def _collect(self, names: list[str] | None = None) -> None:
        """Results home from `names` (the nodes a round's jobs wrote on), else every node."""
        nodes = [self.nodes[n] for n in dict.fromkeys(names or self.nodes)]
        collect(nodes, self.options.paths, self.out.run_id, self.layout, self.progress)

    def _wait(self, specs: list[J.JobSpec], what: str, minutes: int = 0) -> dict[str, str]:
        """Run one phase: queue its jobs, open the window for the drained nodes among them,
        poll until they end; the jobs that never started (see JobQueue.run)."""
        if not specs:
            return {}
        if self.options.hold is not None:  # a run that lost its lock starts no further phase
            self.options.hold()
        names = {n for spec in specs for n in spec.nodes}
        limit = max(minutes, self.out.suite.time_limit_minutes)
        window = functools.partial(
            lift_while_starting, self.ctl, self.kiln_drained, names, outcome=self.out,
            progress=self.progress,
        )  # fmt: skip
        return self.queue.run(specs, what, limit_minutes=limit, submitted=window)

    def _pairwise(self, specs: list[J.JobSpec]) -> int:
        """For each ring that missed its floor (3 nodes or more), the pairwise pass in the
        rounds kiln.burnin.pairwise picks, a phase each, collected after each (`specs` grows by
        their jobs); the rounds run."""
        for gpus, members in sorted(self._groups().items()):
            members = [m for m in members if m not in self.out.not_tested]
            if len(members) < 3 or not self._fabric_slow(self._ring(gpus), members):
                continue  # two nodes: the fabric job already is the pair
            pass_ = PairwisePass(self.cluster, members, self.floors)
            pairs = pass_.first()
            while pairs:
                k = pass_.rounds
                round_ = [self._allreduce(J.pair_name(k, a, b), [a, b], gpus) for a, b in pairs]
                specs += round_
                self._manifest(specs)
                self._wait(round_, f"pairwise pass, round {k + 1} ({len(pairs)} pairs)")
                self._collect([n for spec in round_ for n in spec.nodes])
                found = {spec.nodes: self._result(spec.name) for spec in round_}
                pass_.record({p: r.busbw_at(FABRIC_BYTES)[1] if r and r.correct and not r.wrong
                              else 0.0 for p, r in found.items()})  # fmt: skip
                pairs = pass_.next()
            self.out.pair_rounds += pass_.rounds
        return self.out.pair_rounds

    def _result(self, name: str) -> AllreduceResult | None:
        return P.result_of(name, self.documents.text(f"allreduce/{name}.json"))

    def _fabric_slow(self, name: str, members: list[str]) -> bool:
        return P.ring_slow(self._result(name), fabric_floor(self.cluster, members), name,
                           self.progress)  # fmt: skip

    def _apply_states(self) -> None:
        if self.options.drain:  # else judge only: every window put its drains back already
            settle(self.ctl, self.kiln_drained, self.out, self.progress)

    def _cleanup(self) -> None:
        self.queue.cancel_active()
        self.queue.best_effort(commands.delete_reservation(self.reservation))
