"""Engine overhead: kiln's engine beside stock ansible-playbook on N local hosts.

Each variant runs the same play (5 tasks: command, copy, template, lineinfile, stat) over N hosts
with ansible_connection=local and the same forks, from a clean target directory, and the wall
time is printed with the ratio to stock. Variants:

  stock          ansible-playbook with Ansible's defaults
  stock+pipe     ansible-playbook with ANSIBLE_PIPELINING=True
  kiln           kiln.runner.engine.run_playbook as shipped (ansible-runner, kiln's settings,
                 callback and recorder, and its kiln_mitogen_linear strategy: batched workers
                 over mitogen's linear strategy)
  kiln-linear    the same with KILN_MITOGEN=0: batched workers over Ansible's linear strategy

    python bench/engine_overhead.py --hosts 50 200 --forks 25
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from kiln.runner.engine import PlaybookRequest, run_playbook
from kiln.runner.events import EventRecorder

PLAY = """\
- name: Representative task list
  hosts: all
  gather_facts: false
  tasks:
    - name: Run a command
      ansible.builtin.command: uname -r
      changed_when: false
    - name: Copy a file
      ansible.builtin.copy:
        content: "{{ inventory_hostname }}\\n"
        dest: "{{ bench_dir }}/{{ inventory_hostname }}.copy"
        mode: "0644"
    - name: Template a file
      ansible.builtin.template:
        src: bench.j2
        dest: "{{ bench_dir }}/{{ inventory_hostname }}.conf"
        mode: "0644"
    - name: Edit a line
      ansible.builtin.lineinfile:
        path: "{{ bench_dir }}/{{ inventory_hostname }}.conf"
        line: "edited = true"
    - name: Stat a file
      ansible.builtin.stat:
        path: "{{ bench_dir }}/{{ inventory_hostname }}.copy"
"""
TEMPLATE = "# {{ ansible_managed }}\nhost = {{ inventory_hostname }}\nindex = {{ bench_index }}\n"


def write_fixture(root: Path, hosts: int) -> tuple[Path, Path, Path]:
    inventory, targets = root / "inventory", root / "targets"
    inventory.mkdir(parents=True)
    (root / "play.yml").write_text(PLAY)
    (root / "bench.j2").write_text(TEMPLATE)
    entries = {f"h{index:05d}": {"bench_index": index} for index in range(hosts)}
    document = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "bench_dir": str(targets),
            },
            "hosts": entries,
        }
    }
    (inventory / "hosts.yml").write_text(json.dumps(document))
    return root / "play.yml", inventory, targets


def clean(targets: Path) -> None:
    shutil.rmtree(targets, ignore_errors=True)
    targets.mkdir()


def run_stock(play: Path, inventory: Path, forks: int, extra_env: dict[str, str]) -> float:
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "False", **extra_env}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    start = time.perf_counter()
    proc = subprocess.run(
        ["ansible-playbook", "-i", str(inventory), str(play), "--forks", str(forks)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"stock ansible-playbook failed:\n{proc.stdout[-3000:]}{proc.stderr}")
    return elapsed


def run_kiln(
    play: Path, inventory: Path, forks: int, root: Path, name: str, envvars: dict[str, str]
) -> float:
    private = root / "runs" / name
    with (root / f"{name}.events.jsonl").open("w") as log:
        recorder = EventRecorder("bench", log=log)
        request = PlaybookRequest(
            playbook=play,
            inventory=inventory,
            private_data_dir=private,
            ident=name,
            fact_cache=root / "fact_cache",
            forks=forks,
            envvars=envvars,
        )
        start = time.perf_counter()
        result = run_playbook(request, recorder)
        elapsed = time.perf_counter() - start
    if result.status != "successful" or result.stats is None:
        raise SystemExit(f"kiln engine run failed ({result.status}); see {result.artifact_dir}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--forks", type=int, default=25)
    parser.add_argument("--variants", default="stock,stock+pipe,kiln,kiln-linear")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    variants = args.variants.split(",")
    figures = []
    for hosts in args.hosts:
        with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
            root = Path(tmp)
            play, inventory, targets = write_fixture(root, hosts)
            row: dict[str, float | int] = {"hosts": hosts, "forks": args.forks}
            for variant in variants:
                clean(targets)
                if variant == "stock":
                    row[variant] = run_stock(play, inventory, args.forks, {})
                elif variant == "stock+pipe":
                    row[variant] = run_stock(
                        play, inventory, args.forks, {"ANSIBLE_PIPELINING": "True"}
                    )
                elif variant in ("kiln", "kiln-linear"):
                    mitogen = "1" if variant == "kiln" else "0"
                    with mock.patch.dict(os.environ, {"KILN_MITOGEN": mitogen}):
                        row[variant] = run_kiln(play, inventory, args.forks, root, variant, {})
                print(f"N={hosts:<5} {variant:<13} {row[variant]:7.1f} s", file=sys.stderr)
            figures.append(row)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"{'hosts':>6} {'forks':>5} "
        + " ".join(f"{v:>13}" for v in variants)
        + "   ratio kiln/stock"
        + ("  kiln-linear/stock" if "kiln-linear" in variants else "")
    )
    for row in figures:
        cells = " ".join(f"{row[v]:12.1f}s" for v in variants)
        ratio = f"{row['kiln'] / row['stock']:18.2f}" if "kiln" in row and "stock" in row else ""
        linear = (
            f"{row['kiln-linear'] / row['stock']:19.2f}"
            if "kiln-linear" in row and "stock" in row
            else ""
        )
        print(f"{row['hosts']:>6} {row['forks']:>5} {cells} {ratio}{linear}")


if __name__ == "__main__":
    main()
