"""InfiniBand in burn-in: HCAs read before and after, ib_write_bw pairs per rail, the judging.

The sysfs trees are built here (a test double of /sys/class/infiniband) and read with the very
command burn-in runs on the nodes; the ib_write_bw reports are the real recorded ones in
tests/fixtures/real/ib_write_bw (HDR, 195 Gb/s; RoCE 100G, 98 Gb/s), judged on 200 Gb/s rails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ib_doubles import (
    FIXTURES,
    GEMM,
    HDR_195,
    HEALTHY,
    NODES,
    PCI,
    ROCE_98,
    dump,
    inventory,
)
from kiln.burnin import ib as IB
from kiln.burnin import judge_run
from kiln.fabric.links import parse_sysfs_dump, sysfs_dump_command
from kiln.inventory import require_valid
from kiln.judging import Action, Severity
from kiln.judging.ib import IbPair, IbRail
from kiln.judging.model import NO_IB, BurninReport
from kiln.records.burnin import RunLayout, manifest_entry, write_manifest


def test_the_dump_command_reads_names_guids_pci_ports_and_counters(tmp_path):
    text = dump(tmp_path, {"mlx5_0": {"counters": {"symbol_error": 3}}, "mlx5_1": {}})
    mlx5_0, mlx5_1 = parse_sysfs_dump(text)
    assert (mlx5_0.name, mlx5_0.node_guid, mlx5_0.pci) == (
        "mlx5_0",
        "946dae0300cde72c",
        PCI["mlx5_0"],
    )
    port = mlx5_0.ports[0]
    assert (port.state, port.physical_state, port.rate_gbps, port.guid) == (
        "Active", "LinkUp", 200.0, "946dae0300cde72c",
    )  # fmt: skip
    assert mlx5_0.counters[1] == {"symbol_error": 3, "link_downed": 0, "port_xmit_data": 8}
    assert mlx5_1.pci == PCI["mlx5_1"]
    # A node without the tree (no driver) prints nothing, and says so by exiting 0.
    missing = subprocess.run(
        ["sh", "-c", sysfs_dump_command(str(tmp_path / "absent"))], capture_output=True
    )
    assert (missing.returncode, missing.stdout) == (0, b"")


def test_usable_rails_resolve_guids_and_leave_out_ports_that_are_down(tmp_path):
    views = parse_sysfs_dump(
        dump(tmp_path, {"mlx5_0": {}, "mlx5_1": {"attrs": {"state": "1: DOWN"}}})
    )
    assert IB.usable_rails(["0x946dae0300cde72c", "mlx5_1", "mlx5_7"], views) == {
        0: ("mlx5_0", 200.0)  # rail 1 is down, rail 2 absent: ib_hca says why
    }


def test_rounds_pair_every_node_with_three_peers_on_the_rails_both_can_test(tmp_path):
    views = {n: parse_sysfs_dump(dump(tmp_path / n, HEALTHY)) for n in NODES}
    views["gpu004"] = parse_sysfs_dump(
        dump(tmp_path / "down", {"mlx5_0": {}, "mlx5_1": {"attrs": {"phys_state": "2: Polling"}}})
    )
    declared = {n: ["mlx5_0", "mlx5_1"] for n in NODES}
    rounds = IB.plan_rounds(declared, views, link_rate_gbps=None)
    assert [[(p.client, p.server) for p in r] for r in rounds] == [
        [("gpu001", "gpu004"), ("gpu002", "gpu003")],
        [("gpu001", "gpu002"), ("gpu003", "gpu004")],
        [("gpu001", "gpu003"), ("gpu002", "gpu004")],
    ]
    by_name = {p.name: p for r in rounds for p in r}
    assert by_name["ib-r0-gpu002--gpu003"].rails == (
        IbRail(0, "mlx5_0", "mlx5_0", 200.0),  # no inventory rate: the ports' own
        IbRail(1, "mlx5_1", "mlx5_1", 200.0),
    )
    assert [r.rail for r in by_name["ib-r1-gpu003--gpu004"].rails] == [0]  # gpu004 rail 1 down
    # A node that was not read is left out; two nodes make one round of one pair.
    two = IB.plan_rounds(declared, {n: views[n] for n in NODES[:2]}, link_rate_gbps=400)
    assert [[p.to_dict() for p in r] for r in two] == [
        [{"name": "ib-r0-gpu001--gpu002", "client": "gpu001", "server": "gpu002",
          "rails": [[0, "mlx5_0", "mlx5_0", 400.0], [1, "mlx5_1", "mlx5_1", 400.0]]}]
    ]  # fmt: skip


def record(tmp_path: Path, *, before=None, after=None, reports=None, nodes=NODES) -> Path:
    """A run record with the ib section burn-in writes: GEMM documents of a healthy node, the
    sysfs dumps, and per pair and rail a real ib_write_bw report (HDR unless `reports` says)."""
    run = tmp_path / "run"
    layout = RunLayout(run)
    dumps = {}
    for n in nodes:
        text = dump(tmp_path / "sysfs" / n / "before", (before or {}).get(n, HEALTHY))
        dumps[n] = text
        target = layout.ib_sysfs(n, "before")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if after is not None and n not in after:
            continue  # not read after the jobs
        target = layout.ib_sysfs(n, "after")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(dump(tmp_path / "sysfs" / n / "after", (after or {}).get(n, HEALTHY)))
    rounds = IB.plan_rounds(
        {n: ["mlx5_0", "mlx5_1"] for n in nodes},
        {n: parse_sysfs_dump(t) for n, t in dumps.items()},
        link_rate_gbps=200,
    )
    pairs = [p for r in rounds for p in r]
    write_manifest(
        run, run_id="ibtest", suite="quick", cluster="ibtest", nodes=list(nodes),
        ib=manifest_entry(nodes, pairs),
    )  # fmt: skip
    for n in nodes:
        layout.gemm(n).write_text(GEMM.read_text())
    for pair in pairs:
        for rail in pair.rails:
            source = (reports or {}).get((pair.client, pair.server, rail.rail), HDR_195)
            if source is not None:
                layout.ib_report(pair.name, rail.rail).parent.mkdir(exist_ok=True)
                shutil.copy(source, layout.ib_report(pair.name, rail.rail))
    return run


def failing(report, check):
    return {v.name: v for v in report.failures if v.check == check}


def test_a_slow_hca_is_drained_a_slow_link_investigated_and_risen_counters_named(tmp_path):
    cluster = require_valid(inventory(tmp_path / "inv"))
    slow = {(a, b, 1): ROCE_98 for a, b in [("gpu001", "gpu003"), ("gpu002", "gpu003"),
                                             ("gpu003", "gpu004")]}  # fmt: skip
    slow[("gpu001", "gpu002", 0)] = None  # no report on one pair: the link between them
    after = {n: HEALTHY for n in NODES}
    after["gpu004"] = {"mlx5_0": {"counters": {"symbol_error": 12, "link_downed": 1,
                                               "port_xmit_data": 99999}}, "mlx5_1": {}}  # fmt: skip
    report = judge_run(record(tmp_path, reports=slow, after=after), cluster)

    assert set(failing(report, "ib_bandwidth")) == {"gpu003"}
    assert set(failing(report, "ib_link")) == {"gpu001<->gpu002 rail0"}
    assert set(failing(report, "ib_counters")) == {"gpu004"}
    assert not failing(report, "ib_hca")
    drain = report.drain()
    assert drain == {
        "gpu003": "kiln: ib rail1 mlx5_1 98.0 Gb/s < floor 180 (slow with 3/3 peers)",
        "gpu004": "kiln: ib rail0 mlx5_0 port 1 errors rose: link_downed +1, symbol_error +12",
    }
    link = failing(report, "ib_link")["gpu001<->gpu002 rail0"]
    assert link.action is Action.INVESTIGATE and link.node is None
    assert link.message == (
        "ib rail0 gpu001 mlx5_0 -> gpu002 mlx5_0 no result (floor 180); both nodes fine with "
        "other peers"
    )
    bw = {v.name: v for v in report.verdicts if v.check == "ib_bandwidth"}
    assert bw["gpu001"].passed and bw["gpu001"].threshold == 180.0
    assert bw["gpu003"].measured == pytest.approx(98.03) and bw["gpu003"].unit == "Gb/s"
    section = report.ib
    assert section.nodes == NODES and len(section.links) == 12  # 6 pairs x 2 rails
    assert section.counter_rises == {"gpu004": {"mlx5_0": {"link_downed": 1, "symbol_error": 12}}}
    assert section.summary() == (
        "4 node(s) with HCAs, 12 rail measurement(s), 4 below the floor (lowest 98.0 Gb/s), "
        "1 without a report; error counters rose on 1 node(s)"
    )
    again = BurninReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.ib.to_dict() == section.to_dict() and again.drain() == drain


def test_hca_problems_fail_before_anything_runs_and_unread_counters_are_looked_at(tmp_path):
    cluster = require_valid(inventory(tmp_path / "inv", rate=400))  # the ports run at 200
    before = {
        "gpu001": {
            "mlx5_0": {},
            "mlx5_1": {"attrs": {"state": "1: DOWN", "phys_state": "2: Polling"}},
        }
    }
    after = {n: HEALTHY for n in NODES if n != "gpu002"}  # gpu002 did not answer afterwards
    report = judge_run(record(tmp_path, before=before, after=after), cluster)
    hca = failing(report, "ib_hca")
    assert set(hca) == set(NODES)
    assert hca["gpu001"].severity is Severity.CRITICAL and hca["gpu001"].action is Action.DRAIN
    assert hca["gpu001"].message == (
        "ib rail 0: mlx5_0 port 1 runs at 200 Gb/s, declared 400 Gb/s; "
        "rail 1: mlx5_1 port 1 is Down/Polling, not Active/LinkUp"
    )
    counters = failing(report, "ib_counters")
    assert set(counters) == {"gpu002"} and counters["gpu002"].action is Action.INVESTIGATE
    # gpu001's rail 1 carried no test: its pairs measured rail 0 only.
    rails = {(v.client, v.server): [] for v in report.ib.links}
    for v in report.ib.links:
        rails[(v.client, v.server)].append(v.rail)
    assert all(r == [0] for pair, r in rails.items() if "gpu001" in pair)


def test_two_nodes_cannot_tell_a_node_from_its_link(tmp_path):
    nodes = NODES[:2]
    cluster = require_valid(inventory(tmp_path / "inv", nodes=nodes))
    report = judge_run(
        record(tmp_path, nodes=nodes, reports={("gpu001", "gpu002", 1): ROCE_98}), cluster
    )
    (link,) = failing(report, "ib_link").values()
    assert link.message.endswith(
        "98.0 Gb/s < floor 180; no other peer to tell a node from the link"
    )
    assert report.drain() == {} and not report.passed


def test_most_pairs_slow_on_a_rail_is_the_fabric_and_drains_nobody(tmp_path):
    nodes = [f"gpu00{i}" for i in range(1, 7)]
    cluster = require_valid(inventory(tmp_path / "inv", nodes=nodes))
    slow = {(a, b, 0): ROCE_98 for a in nodes for b in nodes if a < b}
    report = judge_run(record(tmp_path, nodes=nodes, reports=slow), cluster)
    fabric = failing(report, "ib_bandwidth")
    assert list(fabric) == ["ib rail0"]
    assert fabric["ib rail0"].subject == "fabric" and "fabric-wide" in fabric["ib rail0"].message
    assert report.drain() == {}


def test_without_hcas_the_report_says_no_infiniband_declared():
    cpu2 = FIXTURES / "burnin" / "cpu2"
    report = judge_run(cpu2 / "run", require_valid(cpu2 / "inventory"))
    assert report.ib.note == NO_IB and report.ib.links == []
    assert not [v for v in report.verdicts if v.check.startswith("ib_")]
    assert report.to_dict()["summary"]["infiniband"] == NO_IB


# --- the Slurm job and the node-side workload ----------------------------------------------


def test_one_job_per_round_sends_the_table_to_every_node():
    from kiln.burnin import jobs as J
    from kiln.burnin.suites import resolve_suite
    from kiln.inventory.schema import BurninSpec

    rails = (IbRail(0, "mlx5_0", "mlx5_0", 400.0), IbRail(1, "mlx5_1", "mlx5_1", 400.0))
    pairs = [IbPair("ib-r1-n01--n03", "n01", "n03", rails),
             IbPair("ib-r1-n02--n04", "n02", "n04", rails[:1])]  # fmt: skip
    spec = J.ib_round_job("RUN", "res", resolve_suite(BurninSpec(), "standard"), 1, pairs)
    assert (spec.name, spec.nodes, spec.allreduce_jobs) == (
        "ib-r1",
        ("n01", "n02", "n03", "n04"),
        (),
    )
    assert spec.queued_minutes == 5  # 2 rails x (2 x 10 s + 70 s) = 3 min, + 2 min
    lines = spec.script.splitlines()
    assert lines[1:4] == [
        "#SBATCH --job-name=kiln-burnin-ib",
        "#SBATCH --reservation=res",
        "#SBATCH --time=5",
    ]
    assert "#SBATCH --nodelist=n[01-04]" in lines and "#SBATCH --ntasks-per-node=1" in lines
    start = lines.index("cat > \"$table.src\" <<'KILN_IB_TABLE'")
    assert json.loads(lines[start + 1]) == {
        "port": 1, "seconds": 10, "size": 8388608,
        "pairs": [
            {"name": "ib-r1-n01--n03", "client": "n01", "server": "n03",
             "rails": [[0, "mlx5_0", "mlx5_0"], [1, "mlx5_1", "mlx5_1"]]},
            {"name": "ib-r1-n02--n04", "client": "n02", "server": "n04",
             "rails": [[0, "mlx5_0", "mlx5_0"]]},
        ],
    }  # fmt: skip
    assert lines[start + 2 :] == [
        "KILN_IB_TABLE",
        'sbcast --force "$table.src" "$table" || rc=$?',
        "srun --kill-on-bad-exit=0 --ntasks-per-node=1 /opt/kiln/burnin/bin/kiln-burnin ibbw "
        '--table "$table" --out "$out/ib" || rc=$?',
        'rm -f "$table.src"',
        "exit $rc",
    ]
    assert subprocess.run(["bash", "-n"], input=spec.script, text=True).returncode == 0


def load_ibbw():
    import importlib.util

    from kiln.burnin.workloads import workload_path

    spec = importlib.util.spec_from_file_location("kiln_workload_ibbw", workload_path("ibbw"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TABLE = {
    "port": 1, "seconds": 5, "size": 8388608,
    "pairs": [{"name": "ib-r0-a--b", "client": "a", "server": "b",
               "rails": [[0, "mlx5_0", "mlx5_2"], [1, "mlx5_1", "mlx5_3"]]}],
}  # fmt: skip


def test_the_client_retries_until_the_server_listens_and_keeps_only_whole_reports(tmp_path):
    ibbw = load_ibbw()
    assert ibbw.my_pair(TABLE, "b") == ("server", TABLE["pairs"][0])
    assert ibbw.my_pair(TABLE, "c") is None
    now = [0.0]
    calls = []

    def run(argv, **kwargs):
        calls.append(argv)
        rail = int(argv[argv.index("-p") + 1]) - 18515
        if rail == 0 and len(calls) == 1:  # the server is not listening yet
            return subprocess.CompletedProcess(argv, 1, "", " Couldn't connect to b:18515\n")
        if rail == 0:
            return subprocess.CompletedProcess(argv, 0, HDR_195.read_text(), "")
        return subprocess.CompletedProcess(
            argv, 1, "", "Unable to find the Infiniband/RoCE device\n"
        )

    def sleep(seconds):
        now[0] += seconds

    missing = ibbw.connect(
        TABLE, TABLE["pairs"][0], tmp_path, run=run, clock=lambda: now[0], sleep=sleep
    )
    assert missing == [1]
    assert calls[0] == [
        "ib_write_bw", "-d", "mlx5_0", "-i", "1", "-p", "18515", "-F", "--report_gbits",
        "-s", "8388608", "-D", "5", "b",
    ]  # fmt: skip
    assert calls[2][2] == "mlx5_1" and calls[2][6] == "18516"  # rail 1: its own HCA and port
    assert len(calls) == 2 + 36  # rail 1 retried once a second for 5 + 30 s
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ib-r0-a--b-rail0.txt"]
    served = []
    ibbw.serve(TABLE, TABLE["pairs"][0], run=lambda argv, **kw: served.append(argv))
    assert [a[2] for a in served] == ["mlx5_2", "mlx5_3"] and served[1][-1] == "5"


FAKE_IB_WRITE_BW = f"""#!{shutil.which("python3")}
# Test double of perftest's ib_write_bw on 127.0.0.1: the server accepts one client on -p PORT,
# the client connects (refused: exit 1, as perftest does) and prints a recorded real report.
import os, socket, sys
args = sys.argv[1:]
port = int(args[args.index("-p") + 1])
if args[-2] == "-D":
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(1)
    conn, _ = sock.accept()
    conn.sendall(b"ok")
    conn.close()
    sys.exit(0)
try:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.recv(2)
except OSError:
    print(f" Couldn't connect to {{args[-1]}}:{{port}}", file=sys.stderr)
    sys.exit(1)
sys.stdout.write(open(os.environ["FAKE_REPORT"]).read())
"""

FAKE_SRUN = """#!/bin/bash
# Test double of srun: the command after the options, once per node of FAKE_NODES, at once.
while [[ "$1" == -* ]]; do shift; done
pids=()
for n in $FAKE_NODES; do SLURMD_NODENAME=$n "$@" & pids+=($!); done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
"""


@pytest.mark.local
def test_the_round_job_runs_end_to_end_with_doubles_of_srun_sbcast_and_ib_write_bw(tmp_path):
    from kiln.burnin import jobs as J
    from kiln.burnin.suites import resolve_suite
    from kiln.burnin.workloads import workload_path
    from kiln.inventory.schema import BurninSpec

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    workloads = workload_path("ibbw").parent
    scripts = {
        "ib_write_bw": FAKE_IB_WRITE_BW,
        "srun": FAKE_SRUN,
        "sbcast": '#!/bin/sh\n# Test double of sbcast: one shared /tmp here.\ncp "$2" "$3"\n',
        "kiln-burnin": f'#!/bin/sh\nw="$1"; shift\nexec python3 {workloads}/"$w".py "$@"\n',
    }
    for name, text in scripts.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    paths = J.Paths(prefix=str(tmp_path), results=str(tmp_path / "results"))
    rails = (IbRail(0, "mlx5_0", "mlx5_0", 200.0), IbRail(1, "mlx5_1", "mlx5_1", 200.0))
    pair = IbPair("ib-r0-a--b", "a", "b", rails)
    spec = J.ib_round_job("RUN", "res", resolve_suite(BurninSpec()), 0, [pair], paths=paths)
    env = {
        **__import__("os").environ,
        "PATH": f"{bin_}:{__import__('os').environ['PATH']}",
        "SLURM_JOB_ID": f"kiln-test-{__import__('os').getpid()}",
        "SLURMD_NODENAME": "a",
        "FAKE_NODES": "a b",
        "FAKE_REPORT": str(HDR_195),
    }
    done = subprocess.run(
        ["bash"], input=spec.script, text=True, env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "results" / "RUN" / "ib"
    assert sorted(p.name for p in out.iterdir()) == ["ib-r0-a--b-rail0.txt", "ib-r0-a--b-rail1.txt"]
    assert (out / "ib-r0-a--b-rail1.txt").read_text() == HDR_195.read_text()
    assert "ib-r0-a--b: 2 of 2 rails measured" in done.stderr


def test_reports_show_every_rail_measurement_and_the_counters_that_rose(tmp_path):
    import re

    from kiln.report import render

    cluster = require_valid(inventory(tmp_path / "inv"))
    after = {n: HEALTHY for n in NODES}
    after["gpu002"] = {"mlx5_0": {}, "mlx5_1": {"counters": {"symbol_error": 5}}}
    slow = {("gpu001", "gpu003", 0): ROCE_98}
    report = judge_run(record(tmp_path, reports=slow, after=after), cluster)
    doc = json.loads(render(report, "json"))
    links = doc["infiniband"]["links"]
    assert len(links) == 12 and sum(not v["passed"] for v in links) == 1
    assert {"rail": 0, "client": "gpu001", "server": "gpu003", "measured_gbps": 98.03}.items() <= [
        v for v in links if not v["passed"]
    ][0].items()
    html = render(report, "html")
    svgs = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    assert len(svgs) == 4 and len(re.findall(r'<circle class="pt', svgs[3])) == 12
    assert "gpu002</td><td>mlx5_1</td><td>1</td><td>symbol_error +5" in html
    junit = render(report, "junit")
    assert 'name="ib_link gpu001&lt;-&gt;gpu003 rail0"' in junit and "<skipped" not in junit


def test_the_workload_needs_only_python3():
    import ast

    from kiln.burnin.workloads import workload_path

    tree = ast.parse(workload_path("ibbw").read_text())
    roots = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert roots - {"__future__"} <= set(sys.stdlib_module_names)


LEAVES = {f"gpu{i:03d}": f"leaf-{'abcd'[(i - 1) // 3]}" for i in range(1, 13)}  # 4 leaves of 3


def run_the_locators_rounds(tmp_path: Path, slow) -> tuple[Path, list[list[IbPair]]]:
    """A run record of the rounds kiln.burnin.ib.IbPass picks on 12 nodes in 4 leaves, each
    rail's report a real capture: the 98 Gb/s one where `slow(client, server, rail)`."""
    nodes = list(LEAVES)
    root = inventory(tmp_path / "inv", nodes=nodes)
    hosts = (root / "hosts.yml").read_text()
    for node, leaf in LEAVES.items():
        hosts = hosts.replace(
            f"        {node}:\n", f"        {node}:\n          kiln_leaf_switch: {leaf}\n"
        )
    (root / "hosts.yml").write_text(hosts)
    cluster = require_valid(root)
    dumps = {n: dump(tmp_path / "sysfs" / n, HEALTHY) for n in nodes}
    run = tmp_path / "run"
    layout = RunLayout(run)
    pass_ = IB.IbPass(cluster, {n: ["mlx5_0", "mlx5_1"] for n in nodes},
                      {n: parse_sysfs_dump(t) for n, t in dumps.items()},
                      floor_pct=cluster.burnin.ib_write_bw_floor_pct)  # fmt: skip
    rounds, pairs = [], pass_.first()
    while pairs:
        rounds.append(pairs)
        for pair in pairs:  # what the round's job leaves in the record
            for rail in pair.rails:
                source = ROCE_98 if slow(pair.client, pair.server, rail.rail) else HDR_195
                layout.ib_report(pair.name, rail.rail).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, layout.ib_report(pair.name, rail.rail))
        pass_.record(layout, pairs)
        pairs = pass_.next()
    every = [p for r in rounds for p in r]
    write_manifest(run, run_id="ibtest", suite="quick", cluster="ibtest", nodes=nodes,
                   ib=manifest_entry(nodes, every))  # fmt: skip
    for n in nodes:
        layout.gemm(n).write_text(GEMM.read_text())
        for phase in ("before", "after"):
            target = layout.ib_sysfs(n, phase)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(dumps[n])
    return run, rounds, cluster


def test_a_slow_leaf_uplink_is_named_and_nobody_is_drained_for_it(tmp_path):
    """leaf-a's uplink on rail 1 is slow: every rail-1 pair between leaf-a and another leaf
    measures 98 Gb/s. Round one meets it, round two clears the nodes on their own leaves, round
    three tries each implicated leaf against a third: leaf-a/rail1 is named, no node drained
    (without the uplink finding its nodes, slow with two peers of three, were)."""

    def through_uplink(a, b, rail):
        return rail == 1 and (LEAVES[a] == "leaf-a") != (LEAVES[b] == "leaf-a")

    run, rounds, cluster = run_the_locators_rounds(tmp_path, through_uplink)
    assert len(rounds) == 3
    for pairs in rounds:  # each round a matching
        met = [n for p in pairs for n in (p.client, p.server)]
        assert len(met) == len(set(met))
    report = judge_run(run, cluster)
    uplinks = [v for v in report.verdicts if v.check == "ib_uplink"]
    assert [(v.name, v.passed, v.action) for v in uplinks] == [
        ("leaf-a/rail1", False, Action.INVESTIGATE)
    ]
    assert "no node drained" in uplinks[0].message
    drained = [v for v in report.verdicts if not v.passed and v.action == Action.DRAIN]
    assert drained == [], [(v.name, v.check, v.message) for v in drained]


def test_a_bad_rail_is_drained_through_the_locators_rounds_and_its_partner_is_not(tmp_path):
    run, rounds, cluster = run_the_locators_rounds(
        tmp_path, lambda a, b, rail: rail == 1 and "gpu005" in (a, b)
    )
    assert len(rounds) == 2  # nothing across leaves to clear: no uplink round
    report = judge_run(run, cluster)
    failed = {(v.name, v.check) for v in report.verdicts if not v.passed}
    assert failed == {("gpu005", "ib_bandwidth")}, failed
    [verdict] = [v for v in report.verdicts if v.name == "gpu005" and not v.passed]
    assert verdict.action == Action.DRAIN and "ib rail1 mlx5_1" in verdict.message
