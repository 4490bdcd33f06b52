"""The Slurm jobs of a burn-in, as text: the job scripts that launch the workloads.

Pure functions (no SSH, no Slurm), so unit tests check the exact scripts; kiln.slurmctl
submits them (Controller.submit) and issues every Slurm command around them. Every job runs
inside the run's reservation, `--exclusive`, with a hard `--time`, and writes its result on
the node that runs it, under <results>/<run>/ (gemm/<node>.json, allreduce/<job>.json: the run
record's layout), via a temporary name renamed on success, so a killed job leaves no
half-written result. kiln fetches those folders over SSH afterwards (kiln.burnin.collect).

    node         one job per node, pinned to it (--nodelist=NODE -N1): the GEMM on every
                 device of the node, and on GPU nodes an all-reduce across the node's GPUs
                 (NVLink, NCCL); the host it ran on goes into the GEMM document (`host`), so
                 a result from another node is rejected when judged
    fabric       one job over all selected nodes: srun, one rank per GPU (or per CPU-only node,
                 gloo), NCCL_ALGO=Ring (--ring) so the network itself is measured
    (every all-reduce goes through workloads/allreduce_launch.py, which starts nccl-tests'
    all_reduce_perf over PMIx where the nccl stage built it, else workloads/allreduce.py)
    pair         two nodes (-w a,b): the pairwise pass that localises a slow fabric result
    (with kiln_burnin.container the GEMM and the all-reduces run inside that image, as users'
    jobs do: KILN_BURNIN_CONTAINER holds srun's options for it, which the launcher and
    allreduce_launch.py add; the InfiniBand rounds stay on the host, whose tools they test)
    ib round     the nodes of one round of InfiniBand pairs: ib_write_bw per rail between each
                 pair (workloads/ibbw.py on every node, the round's table sbcast to them)
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kiln.burnin import ib as IB
from kiln.burnin.suites import Suite
from kiln.inventory.containers_spec import (
    ContainersSpec,
    bundle_path,
    mirrored_image,
    pyxis_image,
)
from kiln.inventory.model import Node
from kiln.judging.thresholds import DOMAIN_JOB, FABRIC_BYTES
from kiln.render.hostlist import compress
from kiln.slurmctl.leftovers import RESERVATION_PREFIX

DEFAULT_PREFIX = "/opt/kiln/burnin"
DEFAULT_RESULTS = "/var/lib/kiln/burnin"


@dataclass(frozen=True, slots=True)
class Paths:
    """Where the burnin role puts things on the nodes (passed to it as extra vars)."""

    prefix: str = DEFAULT_PREFIX
    results: str = DEFAULT_RESULTS

    @property
    def launcher(self) -> str:
        return f"{self.prefix}/bin/kiln-burnin"

    @property
    def library(self) -> str:
        """The modules the nodes run at collection (kiln.burnin.collect.library_zip)."""
        return f"{self.prefix}/lib/kiln-results.zip"

    def run_dir(self, run_id: str) -> str:
        return f"{self.results}/{run_id}"


@dataclass(frozen=True, slots=True)
class Container:
    """The image burn-in's workloads run in (kiln_burnin.container), and srun's options for it."""

    image: str
    srun_options: tuple[str, ...]

    ENV = "KILN_BURNIN_CONTAINER"  # the launcher and allreduce_launch.py read it


def burnin_container(
    image: str | None, containers: ContainersSpec, mirror_url: str | None = None
) -> Container | None:
    """None without kiln_burnin.container; else the runtime's options: the image's bundle on
    the node (oci, unpacked by the containers stage, through the mirror when one is set) or
    the image itself, which pyxis pulls when the step starts (from the mirror's copy)."""
    if image is None:
        return None
    if containers.runtime == "oci":
        return Container(image, (f"--container={bundle_path(containers.bundle_dir, image)}",))
    source = pyxis_image(mirrored_image(image, mirror_url))
    return Container(image, (f"--container-image={source}", "--no-container-mount-home"))


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One sbatch submission: `name` is kiln's (the record's) name for it."""

    name: str
    script: str
    nodes: tuple[str, ...]
    allreduce_jobs: tuple[str, ...] = ()  # record names of the all-reduce results it writes
    queued_minutes: int = 0  # its time limit, when it queues behind the others on their nodes
    tests: str | None = None  # the one node a per-node job tests (and is pinned to)


def reservation_name(run_id: str) -> str:
    return RESERVATION_PREFIX + run_id.replace(":", "").lower()


# stamp CMD...: CMD's JSON document on stdout with `host` (where it ran) added, unless it has one
_STAMP = """stamp() { "$@" | python3 -c 'import json,sys
try: d = json.load(sys.stdin)
except ValueError: sys.exit("kiln: the workload printed no JSON document")
d.setdefault("host", sys.argv[1]); json.dump(d, sys.stdout)' "$host"; }"""


def _header(
    kind: str,
    run_id: str,
    reservation: str,
    minutes: int,
    paths: Paths,
    extra: Sequence[str],
    log: str = "%j",
    container: Container | None = None,
) -> list[str]:
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=kiln-burnin-{kind}",
        f"#SBATCH --reservation={reservation}",
        f"#SBATCH --time={minutes}",
        "#SBATCH --exclusive",
        "#SBATCH --no-requeue",
        f"#SBATCH --output={paths.results}/logs/{run_id}-{kind}-{log}.log",
        *(f"#SBATCH {option}" for option in extra),
        "set -uo pipefail",
        f"out={shlex.quote(paths.run_dir(run_id))}",
        'mkdir -p "$out/gemm" "$out/allreduce"',
        "# save DEST CMD...: run CMD, keep its stdout as DEST only when it succeeds",
        'save() { local dest="$1"; shift; "$@" > "$dest.tmp" && mv "$dest.tmp" "$dest"; }',
        "rc=0",
    ]
    if container is not None:
        options = " ".join(container.srun_options)
        lines.append(f"export {Container.ENV}={shlex.quote(options)}  # {container.image}")
    return lines


def _gpu_options(gpus: int) -> list[str]:
    return [f"--gres=gpu:{gpus}", f"--ntasks-per-node={gpus}"] if gpus else ["--ntasks-per-node=1"]


def _allreduce_args(
    suite: Suite, gpus: int, minutes: int, ring: bool, across: bool | None = None
) -> str:
    """The launcher's all-reduce options; `across` nodes (default: when the ring is forced)
    the result is judged at FABRIC_BYTES, so the sweep goes up to it."""
    args = [f"--iters {suite.allreduce_iters}", f"--timeout {minutes * 60}"]
    args.append("--backend nccl" if gpus else "--backend gloo")
    if ring:
        args.append("--ring")
    if gpus and (ring if across is None else across):
        args.append(f"--max-bytes {FABRIC_BYTES}")
    return " ".join(args)


def node_job(
    run_id: str,
    reservation: str,
    suite: Suite,
    node: str,
    *,
    gpus: int,
    paths: Paths = Paths(),
    container: Container | None = None,
) -> JobSpec:
    """The per-node tests of `node`, pinned to it: its results are named by it, and the GEMM
    document records the host the job really ran on (kiln rejects a result from another)."""
    extra = ["--nodes=1", f"--nodelist={node}", *_gpu_options(gpus)]
    minutes = suite.time_limit_minutes
    lines = _header("node", run_id, reservation, minutes, paths, extra, f"{node}-%j", container)
    seconds = f"{suite.gemm_seconds(bool(gpus)):g}"
    lines += [
        f"node={shlex.quote(node)}  # the node this job tests (it is pinned there)",
        'host="$(hostname -s)"  # the node it runs on',
        _STAMP,
        f'save "$out/gemm/$node.json" stamp {paths.launcher} gemm --seconds {seconds} || rc=$?',
    ]
    jobs: tuple[str, ...] = ()
    if gpus > 1:
        args = _allreduce_args(suite, gpus, suite.time_limit_minutes, ring=False)
        lines.append(
            f'save "$out/allreduce/node-$node.json" {paths.launcher} allreduce_launch '
            f"--ntasks-per-node {gpus} {args} || rc=$?"
        )
        jobs = (f"node-{node}",)
    lines.append("exit $rc")
    return JobSpec(f"node-{node}", "\n".join(lines) + "\n", (node,), jobs, tests=node)


def allreduce_job(
    run_id: str,
    reservation: str,
    suite: Suite,
    name: str,
    nodes: Sequence[str],
    *,
    gpus: int,
    paths: Paths = Paths(),
    container: Container | None = None,
    ring: bool = True,
) -> JobSpec:
    """An all-reduce across `nodes` (exactly those): fabric and pair jobs force the ring (the
    network's floor); an NVLink domain's job lets NCCL choose (NVLink SHARP across the rack)."""
    minutes = suite.time_limit_minutes
    extra = [f"--nodes={len(nodes)}", f"--nodelist={compress(nodes)}", *_gpu_options(gpus)]
    kind = name.split("-")[0]
    lines = _header(kind, run_id, reservation, minutes, paths, extra, container=container)
    args = _allreduce_args(suite, gpus, minutes, ring=ring, across=True)
    lines.append(
        f'save "$out/allreduce/{name}.json" {paths.launcher} allreduce_launch '
        f"--ntasks-per-node {max(gpus, 1)} {args} || rc=$?"
    )
    lines.append("exit $rc")
    return JobSpec(name, "\n".join(lines) + "\n", tuple(nodes), (name,))


def domain_job_name(domain: str) -> str:
    """The job (and result file) of an NVLink domain's all-reduce: its name made file-safe."""
    return DOMAIN_JOB + "".join(c if c.isalnum() or c in "._-" else "_" for c in domain)


def domain_jobs(
    run_id: str,
    reservation: str,
    suite: Suite,
    nodes: Mapping[str, Node],
    *,
    paths: Paths = Paths(),
    container: Container | None = None,
) -> list[JobSpec]:
    """An all-reduce across each multi-node NVLink domain (an NVL72 rack: the trays that
    declare its kiln_nvlink_domain, two or more), where their profile has a rack-scale floor."""
    domains: dict[str, list[str]] = {}
    for name, node in nodes.items():
        if node.nvlink_domain and node.profile.burnin_floors.allreduce_domain_busbw_gbs:
            domains.setdefault(node.nvlink_domain, []).append(name)
    return [
        allreduce_job(
            run_id,
            reservation,
            suite,
            domain_job_name(domain),
            members,
            gpus=nodes[members[0]].gpu_count,
            paths=paths,
            container=container,
            ring=False,
        )  # fmt: skip
        for domain, members in sorted(domains.items())
        if len(members) >= 2
    ]


def pair_name(round_: int, a: str, b: str) -> str:
    return f"pair-r{round_}-{a}--{b}"


def ib_round_job(
    run_id: str,
    reservation: str,
    suite: Suite,
    round_: int,
    pairs: Sequence[IB.IbPair],
    *,
    paths: Paths = Paths(),
) -> JobSpec:
    """One round of InfiniBand pairs: ib_write_bw on each pair's rails, every pair at once.

    One job per round (not per pair) keeps a 12,500-node fabric at three submissions; the
    table goes to every node with sbcast, so the nodes need no shared filesystem."""
    seconds = suite.ib_write_bw_seconds
    rails = max(len(p.rails) for p in pairs)
    # A healthy rail takes `seconds`; a broken one at most 2 x seconds + 70 (workloads/ibbw.py).
    minutes = math.ceil(rails * (2 * seconds + 70) / 60) + 2
    nodes = sorted({n for p in pairs for n in (p.client, p.server)})
    extra = [f"--nodes={len(nodes)}", f"--nodelist={compress(nodes)}", "--ntasks-per-node=1"]
    lines = _header("ib", run_id, reservation, minutes, paths, extra)
    document = json.dumps(IB.table(pairs, seconds), separators=(",", ":"))
    marker = "KILN_IB_TABLE"
    while marker in document:
        marker += "_"
    lines += [
        "# the round's pairs and rails, copied to every node of the job",
        'table="/tmp/kiln-ib-$SLURM_JOB_ID.json"',
        f"cat > \"$table.src\" <<'{marker}'",
        document,
        marker,
        'sbcast --force "$table.src" "$table" || rc=$?',
        f"srun --kill-on-bad-exit=0 --ntasks-per-node=1 {paths.launcher} ibbw "
        '--table "$table" --out "$out/ib" || rc=$?',
        'rm -f "$table.src"',
        "exit $rc",
    ]
    return JobSpec(f"ib-r{round_}", "\n".join(lines) + "\n", tuple(nodes), (), minutes)
