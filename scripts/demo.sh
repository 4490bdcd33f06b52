#!/usr/bin/env bash
# `make demo`: kiln's real flow on the local Docker sandbox. New nodes join Slurm quarantined
# (drained), a quick burn-in passes on them, kiln resumes them; `kiln status` before and after.
# Every step reports progress at least every 15 s; the closing note says what was proven.
set -euo pipefail
KILN=${KILN:-.venv/bin/kiln}
REPORT_DIR=${KILN_DEMO_REPORT:-.kiln/demo}
started=$SECONDS

step() { printf '\n\033[1m== %s\033[0m (%ds)\n' "$1" "$((SECONDS - started))"; }

step "1/5 the sandbox: kiln-ctl and two nodes in Docker (the node image is built once, then cached)"
# The inventory it writes (its path on stdout) declares the nodes' release (KILN_SANDBOX_OS) and
# its Slurm; inventories/sandbox is the same for the default Debian 13.
INVENTORY=$("$KILN" sandbox up --nodes 2)
step "2/5 provision every stage over SSH: base, Slurm, monitoring, burn-in runtime"
"$KILN" provision "$INVENTORY" --yes
step "3/5 before burn-in: new nodes are drained with kiln's quarantine reason"
"$KILN" status "$INVENTORY" || true  # a drained node is what this step shows, not an error
step "4/5 quick burn-in through Slurm: GEMM and all-reduce on both nodes, judged"
mkdir -p "$REPORT_DIR"
"$KILN" burnin "$INVENTORY" --suite quick --output "$REPORT_DIR"
step "5/5 after burn-in: the nodes passed and kiln resumed them"
"$KILN" status "$INVENTORY"

# The Slurm release the sandbox's inventory declares (24.11 on Debian 13, 22.05 on Debian 12).
SLURM=$(sed -n 's/^  slurm: "\(.*\)"$/\1/p' "$INVENTORY/group_vars/all.yml")
cat <<NOTE

kiln demo done in $((SECONDS - started))s. What it proved:
  - kiln provisioned a 2-node Slurm $SLURM cluster over SSH with host key checking;
  - nodes kiln had never seen joined drained (quarantined), never schedulable untested
    (on a sandbox that was provisioned before, they are known already and stay idle);
  - a burn-in ran through Slurm, was judged against thresholds, and resumed only nodes that passed.
HTML report: $(cd "$REPORT_DIR" && pwd)/report.html (also report.json and JUnit report.xml)
Try next:
  $KILN status $INVENTORY                            # Slurm state, drain reasons, last burn-in
  $KILN exec $INVENTORY --nodes kiln_compute -- nproc  # one command on every node
  $KILN report $REPORT_DIR/report.json               # the burn-in again, failing items first
  $KILN sandbox down                                   # remove the containers (the image stays)
NOTE
