"""Drains and resumes that cannot undo someone else's, and the window burn-in tests through.

    done = compare_and_set(ctl, [Change("gpu001", expected=QUARANTINE, reason=None)])
    window = open_window(ctl, {"gpu001": QUARANTINE}, job_ids, wait_seconds=60)

`compare_and_set`: each change names the reason the node holds now as the caller last read it
(None: not drained) and what it should become (a reason: drain; None: resume). One script on
the controller reads every node again (`sinfo`) and changes only a node still as expected, so a
drain an operator or the health check placed meanwhile is never overwritten or lifted; then
the nodes are read back. Each change comes back applied, kept (it was no longer as expected:
what it is now) or failed.

`open_window`: a drained node runs no new job, so to test a quarantined node burn-in lifts its
drain while its jobs start, and puts the reason back at once: a running job keeps running on
a drained node (Slurm shows it "draining"), and nothing else starts there. The lift, the wait
for the jobs to leave PENDING and the drain are one program on the controller, started in a
session of its own (`setsid`): a kill of kiln, of the machine running it, or a cut SSH link
cannot stop it half-way, so a node kiln lifted is drained again within `wait_seconds`, whatever
happens to kiln. A lock file serialises windows (the next run's clean-up waits on it). Lifting is
a compare-and-set too: a node whose reason is no longer the one given is left as it is (kept),
and a node someone drained while it was lifted keeps their reason.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kiln.errors import OperationFailed
from kiln.slurmctl.remote import Controller

MARK = "@@kiln-cas"
WINDOW_LOCK = "/run/kiln-burnin-window.lock"
# A drain or failed flag keeps Slurm from scheduling anything new; DOWN does not count: a down
# node returns to service by itself when its slurmd registers (ReturnToService).
_HELD = "*drain*|*DRAIN*|*fail*|*FAIL*"

# Both programs read every node once (`sinfo`: one line per node, state and reason; a node in
# several partitions prints several equal lines), then change nodes in as few `scontrol update`
# calls as there are distinct targets (a hostlist each): 12,500 nodes cost a few calls, not
# 25,000. A batch scontrol refuses is retried node by node, so one bad name stops no other.
_COMMON = r"""
declare -A state now
read_all() {
  state=() now=()
  local n s r
  while IFS='|' read -r n s r; do
    [[ -n ${state[$n]+set} ]] || { state[$n]=$s; now[$n]=$r; }
  done < <(sinfo --noheader --Node --format='%N|%T|%E')
}
held() { case ${state[$1]:-} in __HELD__) return 0 ;; esac; return 1; }
# update VERB REASON NODE...: one scontrol call, else one per node; each node's outcome printed
update() {
  local verb=$1 reason=$2 said=$3 failed=$4; shift 4
  local list; list=$(IFS=,; echo "$*")
  local args=(state="$verb"); [[ $verb == drain ]] && args+=(reason="$reason")
  if scontrol update nodename="$list" "${args[@]}"; then
    for n in "$@"; do echo "__MARK__ $n $said"; done
  else
    for n in "$@"; do
      if scontrol update nodename="$n" "${args[@]}"; then echo "__MARK__ $n $said"
      else echo "__MARK__ $n $failed"; fi
    done
  fi
}
"""

# Arguments: NODE EXPECTED TARGET per node; EXPECTED and TARGET are "-" (not drained / resume)
# or "=REASON". The current reason is `sinfo %E` ("none" when there is none).
_CAS = (
    _COMMON
    + r"""
read_all
declare -A drains
resumes=()
while (($# >= 3)); do
  node=$1 expected=$2 target=$3; shift 3
  if [[ -z ${state[$node]+set} ]]; then
    echo "__MARK__ $node failed not known to Slurm"; continue
  fi
  if held "$node"; then ok=$([[ "=${now[$node]}" == "$expected" ]] && echo 1)
  else ok=$([[ $expected == - ]] && echo 1); fi
  if [[ -z $ok ]]; then
    echo "__MARK__ $node kept ${state[$node]}|${now[$node]}"
  elif [[ $target == - ]]; then
    resumes+=("$node")
  else
    drains[${target#=}]+="${drains[${target#=}]:+ }$node"
  fi
done
refused="failed scontrol update exited non-zero"
((${#resumes[@]})) && update resume "" applied "$refused" "${resumes[@]}"
for reason in "${!drains[@]}"; do
  read -ra group <<< "${drains[$reason]}"
  update drain "$reason" applied "$refused" "${group[@]}"
done
"""
)

_WINDOW = (
    _COMMON
    + r"""
exec 9>>__LOCK__ && flock 9
wait_s=$1 jobs=$2; shift 2
declare -A want lifted
read_all
ok=()
while (($# >= 2)); do
  node=$1 reason=$2; shift 2
  want[$node]=$reason
  if held "$node" && [[ ${now[$node]} == "$reason" ]]; then ok+=("$node")
  else echo "__MARK__ $node kept ${state[$node]:-unknown}|${now[$node]:-}"; fi
done
if ((${#ok[@]})); then
  while read -r mark node result rest; do
    echo "$mark $node $result${rest:+ $rest}"
    [[ $result == lifted ]] && lifted[$node]=1
  done < <(update resume "" lifted "unlifted scontrol refused to resume it" "${ok[@]}")
fi
end=$((SECONDS + wait_s))
while ((${#lifted[@]} && SECONDS < end)); do
  left=$(squeue --noheader --array --jobs="$jobs" --states=PENDING --format=%i 2>/dev/null | wc -l)
  ((left == 0)) && break
  sleep 1
done
read_all
declare -A drains
for node in "${!lifted[@]}"; do
  if held "$node"; then echo "__MARK__ $node kept ${state[$node]}|${now[$node]}"
  else drains[${want[$node]}]+="${drains[${want[$node]}]:+ }$node"; fi
done
for reason in "${!drains[@]}"; do
  read -ra group <<< "${drains[$reason]}"
  update drain "$reason" restored "failed to drain it again" "${group[@]}"
done
"""
)
_CAS = _CAS.replace("__HELD__", _HELD).replace("__MARK__", MARK)
_WINDOW = _WINDOW.replace("__HELD__", _HELD).replace("__MARK__", MARK)
_WINDOW = _WINDOW.replace("__LOCK__", WINDOW_LOCK)


@dataclass(frozen=True, slots=True)
class Change:
    node: str
    expected: str | None  # the reason it holds now, as last read; None: not drained
    reason: str | None  # the reason to place; None: resume


@dataclass(frozen=True, slots=True)
class Outcome:
    node: str
    result: str  # applied | kept | failed; the window: restored | kept | unlifted | failed
    now: str = ""  # kept: the state and reason it holds instead; failed: why


def _read(stdout: str) -> dict[str, Outcome]:
    """The last outcome line of each node."""
    found: dict[str, Outcome] = {}
    for line in stdout.splitlines():
        if line.startswith(MARK + " "):
            parts = line[len(MARK) + 1 :].split(" ", 2)
            if len(parts) >= 2:
                found[parts[0]] = Outcome(parts[0], parts[1], parts[2] if len(parts) > 2 else "")
    return found


def _coded(reason: str | None) -> str:
    return "-" if reason is None else "=" + reason


def cas_script(changes: Sequence[Change]) -> str:
    args = [a for c in changes for a in (c.node, _coded(c.expected), _coded(c.reason))]
    return shlex.join(["bash", "-c", _CAS, "kiln-cas", *args])


def compare_and_set(ctl: Controller, changes: Sequence[Change]) -> list[Outcome]:
    """Apply each change only where the node still holds what the caller expects; one outcome
    per change. OperationFailed when the controller does not answer (nothing is known)."""
    if not changes:
        return []
    answer = ctl.shell(cas_script(changes), "compare-and-set of drains")
    found = _read(answer)
    return [found.get(c.node, Outcome(c.node, "failed", "no answer for it")) for c in changes]


def window_script(drains: Mapping[str, str], job_ids: Sequence[str], wait_seconds: int) -> str:
    """The detached window program, its output kept in a file and printed when it ends."""
    args = [str(int(wait_seconds)), ",".join(job_ids) or "0"]
    args += [a for node, reason in drains.items() for a in (node, reason)]
    program = shlex.join(["bash", "-c", _WINDOW, "kiln-window", *args])
    return (
        "log=$(mktemp /tmp/kiln-window.XXXXXX) || exit 1\n"
        f'setsid --wait {program} >"$log" 2>&1 </dev/null &\n'
        'wait $!; rc=$?; cat "$log"; rm -f "$log"; exit $rc\n'
    )


def open_window(
    ctl: Controller, drains: Mapping[str, str], job_ids: Sequence[str], *, wait_seconds: int
) -> list[Outcome]:
    """Lift `drains` (node -> the reason it holds) until `job_ids` have started or
    `wait_seconds` pass, then drain each again with its reason (detached on the controller).
    Outcomes per node: restored, kept (someone drained it meanwhile), unlifted (scontrol
    refused the lift: still drained) or failed."""
    if not drains:
        return []
    try:
        answer = ctl.shell(
            window_script(drains, job_ids, wait_seconds),
            "the burn-in window",
            timeout=wait_seconds + 60,
        )
    except OperationFailed as error:  # the program goes on on the controller regardless
        raise OperationFailed(
            f"{error.message}; the nodes' drains are put back on the controller regardless",
            hint=error.hint,
        ) from None
    found = _read(answer)
    return [found.get(n, Outcome(n, "failed", "no answer for it")) for n in drains]
