"""A burn-in campaign through Slurm: the core of `kiln burnin` (no printing).

    outcome = run_burnin(cluster, BurninOptions(suite="quick"), progress=callback)

1. The runtime: the `burnin` stage (playbooks/burnin.yml) through kiln's engine, on the
   selected compute nodes (idempotent: a no-op when everything is in place).
2. Isolation: a maintenance reservation over the selected nodes (`flags=maint,ignore_jobs`,
   `users=root`): no production job starts on them while it exists, and jobs already running
   are never touched (ours queue behind them, `--exclusive`). Nodes that kiln drained earlier
   (reason "kiln: ...", quarantine or a failed burn-in) are resumed INSIDE the reservation, so
   they run burn-in but still take no production work. Nodes drained or down for any other
   reason are left alone and skipped.
3. The jobs (kiln.burnin.jobs): a node array, the fabric all-reduce, on nodes that declare
   HCAs ib_write_bw per rail between node pairs (kiln.burnin.ib: their HCAs read over SSH
   before and after, for the names, the port states and the error counters), and, when the
   fabric misses its floor, the pairwise pass; polled with squeue, cancelled at their deadline.
4. Results fetched over SSH from every node into the run record (RunLayout), judged
   (judge_run), report.json / report.xml / report.html saved.
5. Node states: failing nodes drained with their reason ("kiln: gemm ..."); passing nodes kiln
   had drained stay resumed; `drain=False` puts every node back as it was. Then the
   reservation goes. On an error or Ctrl-C the jobs are cancelled, the drains kiln lifted are
   restored and the reservation is deleted before the exception propagates.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from kiln.burnin import ib as IB
from kiln.burnin import jobs as J
from kiln.burnin.model import BurninReport
from kiln.burnin.pairs import pair_schedule
from kiln.burnin.record import RunLayout, judge_run, save_report, write_manifest
from kiln.burnin.results import ResultError, allreduce_from_doc
from kiln.burnin.suites import Suite, resolve_suite
from kiln.burnin.thresholds import floors_for
from kiln.errors import EnvironmentProblem, InvalidInputError, OperationFailed
from kiln.fabric.links import parse_sysfs_dump, sysfs_dump_command
from kiln.fleet import Status, run_command, select_nodes
from kiln.inventory import Cluster, Node
from kiln.parsers import ParseError
from kiln.parsers.slurm import SlurmNode, parse_scontrol_nodes
from kiln.plan.stages import Stage
from kiln.profiles import get_profile
from kiln.records.runs import RunRecord, state_dir

BURNIN_STAGE = Stage("burnin", "burnin.yml", "burn-in workloads and their torch runtime")
Progress = Callable[[str], None]


@dataclass
class BurninOptions:
    suite: str | None = None  # None: the inventory's kiln_burnin.suite
    nodes: str | None = None  # a --nodes selector; None: every compute node
    hours: float | None = None  # soak duration
    gemm_seconds: float | None = None  # override the suite's GEMM duration
    drain: bool = True  # drain failing nodes, keep passing ones resumed
    install: bool = True  # run the burnin stage first
    paths: J.Paths = field(default_factory=J.Paths)
    poll_seconds: float = 3.0


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


class Controller:
    """Runs Slurm commands on the controller over SSH (kiln.fleet), as root."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def run(self, command: str, *, timeout: float = 60, check: bool = True) -> str:
        result = run_command([self.node], as_root(self.node, command), timeout=timeout).results[0]
        if check and result.status is not Status.OK:
            detail = (result.stderr or result.stdout or result.error or "").strip()
            raise OperationFailed(
                f"{self.node.name}: `{command.splitlines()[0]}` {result.status}: {detail[-400:]}"
            )
        return result.stdout


def as_root(node: Node, command: str) -> str:
    user = str(node.hostvars.get("ansible_user") or node.hostvars.get("ansible_ssh_user") or "")
    if user == "root":
        return command
    return f"sudo -n sh -c {_quote(command)}"


def _quote(text: str) -> str:
    return shlex.quote(text)


def select_compute(cluster: Cluster, selector: str | None) -> list[Node]:
    compute = {node.name for node in cluster.compute}
    chosen = [n for n in select_nodes(cluster, selector) if n.name in compute]
    if not chosen:
        raise InvalidInputError(
            f"--nodes {selector!r} selects no compute node" if selector else "no compute nodes"
        )
    return chosen


def classify(states: list[SlurmNode], wanted: list[str]) -> tuple[list[str], dict, dict]:
    """(nodes to test, {kiln-drained node: its reason}, {skipped node: why})."""
    by_name = {s.name: s for s in states}
    usable, kiln_drained, skipped = [], {}, {}
    for name in wanted:
        node = by_name.get(name)
        if node is None:
            skipped[name] = "not known to Slurm"
        elif node.drain and node.reason is not None and node.reason.set_by_kiln:
            kiln_drained[name] = node.reason.text
            usable.append(name)
        elif node.drain:
            reason = node.reason.text if node.reason else "no reason"
            skipped[name] = f"drained by someone else ({reason})"
        elif node.state in ("DOWN", "FUTURE", "UNKNOWN") or node.not_responding:
            skipped[name] = f"Slurm state {node.state}"
        else:
            usable.append(name)
    return usable, kiln_drained, skipped


def run_burnin(
    cluster: Cluster, options: BurninOptions, *, progress: Progress = lambda _: None
) -> BurninOutcome:
    started = time.monotonic()
    if not cluster.controllers:
        raise InvalidInputError("the inventory has no controller (kiln_controllers)")
    suite = resolve_suite(
        cluster.burnin, options.suite, hours=options.hours, gemm_seconds=options.gemm_seconds
    )
    chosen = select_compute(cluster, options.nodes)
    names = [n.name for n in chosen]
    timings: dict[str, float] = {}
    if options.install:
        progress(f"runtime: burnin stage on {len(names)} node(s)")
        _install(cluster, names, options.paths)
        timings["runtime"] = time.monotonic() - started
    controller = Controller(cluster.controllers[0])
    try:
        states = parse_scontrol_nodes(controller.run(J.show_nodes(names)))
    except ParseError as exc:
        raise EnvironmentProblem(f"cannot read the Slurm node states: {exc}") from None
    usable, kiln_drained, skipped = classify(states, names)
    for name, why in skipped.items():
        progress(f"skipping {name}: {why}")
    if not usable:
        raise OperationFailed("no selected node can run burn-in", hint="see the skipped nodes")
    record = RunRecord.create(state_dir())
    outcome = BurninOutcome(
        record.run_id, record.path, suite, usable, BurninReport(cluster.name), skipped=skipped
    )
    campaign = _Campaign(cluster, options, controller, outcome, progress, kiln_drained)
    campaign.run()
    timings["total"] = time.monotonic() - started
    outcome.timings = {**timings, **outcome.timings}
    return outcome


def _install(cluster: Cluster, names: list[str], paths: J.Paths) -> None:
    from kiln.burnin.workloads import workload_path
    from kiln.runner.provision import ProvisionOptions, provision

    options = ProvisionOptions(
        stages=[BURNIN_STAGE],
        limit=",".join(names),
        extravars={
            "burnin_prefix": paths.prefix,
            "burnin_results_dir": paths.results,
            "burnin_workloads_src": str(workload_path("gemm").parent),
        },
    )
    summary = provision(cluster, options)
    if summary["exit_code"] != 0:
        bad = summary["failed_hosts"] + summary["unreachable_hosts"]
        stopped = (summary.get("stopped") or {}).get("reason", "")
        raise OperationFailed(
            f"the burn-in runtime did not install on {', '.join(bad) or 'the nodes'} {stopped}",
            hint=f"see the run record {summary['record']}",
        )


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
        self.ib_pairs: list[IB.IbPair] = []

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
        self.ctl.run(J.create_reservation(self.reservation, out.nodes, minutes))
        self.progress(f"reservation {self.reservation} on {len(out.nodes)} node(s)")
        finished = False
        try:
            for name in self.kiln_drained:
                self.ctl.run(J.resume(name))
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
            self._save_renderings()
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
            ib=IB.manifest_entry(self.ib_nodes, self.ib_pairs) if self.ib_nodes else None,
        )

    def _ib_plan(self) -> list[list[IB.IbPair]]:
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
        """/sys/class/infiniband of every HCA node into the run record ("before"/"after")."""
        if not self.ib_nodes:
            return {}
        dumps = {}
        for res in run_command_as_root(
            [self.nodes[n] for n in self.ib_nodes], sysfs_dump_command()
        ):
            if res.status is not Status.OK:
                self.progress(f"{res.name}: HCAs not read {phase} ({res.status}: {res.error})")
                continue
            path = self.layout.ib_sysfs(res.name, phase)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(res.stdout, encoding="utf-8")
            dumps[res.name] = res.stdout
        return dumps

    def _submit_and_wait(self, specs: list[J.JobSpec], what: str) -> None:
        ids = []
        for spec in specs:
            text = self.ctl.run(J.sbatch(spec.script)).strip().splitlines()
            job_id = text[-1].split(";")[0].strip() if text else ""
            if not job_id.isdigit():
                raise OperationFailed(f"sbatch of {spec.name} printed no job id: {text!r}")
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
            text = self.ctl.run(J.squeue(ids), check=False)
            states = [line.split("|") for line in text.splitlines() if "|" in line]
            if not states:
                break
            summary = _count_states(states)
            if summary != last:
                self.progress(f"{what}: {summary}")
                last = summary
            if time.monotonic() > deadline:
                self.progress(f"{what}: deadline passed; cancelling {', '.join(ids)}")
                self.ctl.run(J.scancel(ids), check=False)
                break
            time.sleep(self.options.poll_seconds)
        self.active = [j for j in self.active if j not in ids]

    def _collect(self) -> None:
        """Fetch every node's results of this run into the run record (and remove them there)."""
        command = J.fetch(self.options.paths, self.out.run_id)
        results = run_command_as_root(list(self.nodes.values()), command)
        for res in results:
            if res.status is not Status.OK:
                self.progress(f"{res.name}: results not fetched ({res.status}: {res.error})")
                continue
            try:
                files = json.loads(res.stdout)
            except ValueError:
                self.progress(f"{res.name}: unreadable results listing")
                continue
            for rel, text in files.items():
                self._store(res.name, rel, text)

    def _store(self, node: str, rel: str, text: str) -> None:
        parts = PurePosixPath(rel).parts
        if len(parts) != 2 or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            return
        kind, name = parts
        if kind == "gemm" and name.endswith(".json"):
            target = self.layout.gemm(name[: -len(".json")])
        elif kind == "allreduce" and name.endswith(".json"):
            target = self.layout.allreduce(name[: -len(".json")])
        elif kind == "ib" and name.endswith(".txt"):
            target = self.layout.root / "ib" / name  # <pair>-rail<k>.txt, from the client
        elif kind == "logs":
            target = self.layout.root / "logs" / node / name
        else:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

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

    def _save_renderings(self) -> None:
        from kiln.report import render

        root = self.layout.root
        (root / "report.xml").write_text(render(self.out.report, "junit"), encoding="utf-8")
        (root / "report.html").write_text(render(self.out.report, "html"), encoding="utf-8")

    def _apply_states(self) -> None:
        drains = self.out.report.drain()
        if not self.options.drain:
            self._restore()
            return
        for node in self.out.nodes:
            reason = drains.get(node)
            if reason is not None:
                self.ctl.run(J.drain(node, reason))
                self.out.drained[node] = reason
        self.out.resumed = [n for n in self.resumed if n not in drains]
        self.resumed = []

    def _restore(self) -> None:
        """Put back the drains kiln lifted for the run (interrupted, failed, or --no-drain)."""
        for node in self.resumed:
            self.ctl.run(J.drain(node, self.kiln_drained[node]), check=False)
        self.resumed = []

    def _cleanup(self, finished: bool) -> None:
        if self.active:
            self.ctl.run(J.scancel(self.active), check=False)
            self.active = []
        if not finished:
            self._restore()
        self.ctl.run(J.delete_reservation(self.reservation), check=False)


def run_command_as_root(nodes: list[Node], command: str):
    """`command` on every node as root; results in node order."""
    by_user: dict[str, list[Node]] = {}
    for node in nodes:
        by_user.setdefault(as_root(node, command), []).append(node)
    results = []
    for wrapped, group in by_user.items():
        results += run_command(group, wrapped, timeout=120).results
    return results


def _count_states(states: list[list[str]]) -> str:
    counts: dict[str, int] = {}
    for row in states:
        counts[row[1]] = counts.get(row[1], 0) + 1
    return ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))
