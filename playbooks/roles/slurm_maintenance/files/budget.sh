# The disruption budget, run on the Slurm controller (bash -c, from tasks/budget.yml):
#   DIR BUDGET RUN_ID NODE REASON [NODE REASON ...]
# Under one lock (DIR/lock, on the controller every shard and worker controller reaches), counts
# the nodes out of service for kiln's rolling changes: every node whose drain reason is
# kiln:maintenance:..., whichever shard or run placed it. When the nodes asked for fit beside
# them (at most BUDGET in all; 0: no budget), drains each with its REASON; else drains none.
# Slurm's own reasons are the slots, on nodes out of service (drained, draining, down or failed):
# a node resumed frees its slot (Slurm 23.11+ keeps its last reason beside "idle", which holds
# nothing), a node a killed or failed run left drained keeps it, and nothing else is released.
# Prints "@@kiln-budget <word> <node> [reason]" lines; exit 0: drained (each "drained"), 75: full,
# and some holder is this run's, still at work ("held"), 76: full, and every holder stays
# drained ("stays": an earlier run's drain, or one DIR/left/<node> says this run left after a
# failure), 1: Slurm or the lock failed (the words follow "error").
set -u
mark=@@kiln-budget
dir=$1 budget=$2 run=$3
shift 3
mkdir -p "$dir/left" || exit 1
exec 9>>"$dir/lock" || exit 1
if ! flock -w 60 9; then
  echo "$mark error the budget's lock $dir/lock stayed busy for 60 s"
  exit 1
fi
if ! listing=$(sinfo --noheader --Node --format='%N|%T|%E' 2>&1); then
  echo "$mark error sinfo: ${listing//$'\n'/ }"
  exit 1
fi
declare -A seen=()
holders=()
while IFS='|' read -r node state reason; do  # the reason is the rest of the line, "|" and all
  [[ $state == drain* || $state == down* || $state == fail* ]] || continue
  [[ $reason == kiln:maintenance:* && -z ${seen[$node]:-} ]] || continue
  seen[$node]=1
  holders+=("$node|$reason")
done <<<"$listing"
if ((budget == 0 || ${#holders[@]} + $# / 2 <= budget)); then
  while (($# >= 2)); do
    if ! said=$(scontrol update nodename="$1" state=drain reason="$2" 2>&1); then
      echo "$mark error scontrol update nodename=$1 state=drain: ${said//$'\n'/ }"
      exit 1
    fi
    echo "$mark drained $1"
    shift 2
  done
  exit 0
fi
working=0
for holder in "${holders[@]}"; do
  node=${holder%%|*} reason=${holder#*|}
  if [[ $reason == "kiln:maintenance:$run:"* ]] && ! grep -qxF -- "$reason" "$dir/left/$node" 2>/dev/null; then
    echo "$mark held $node $reason"
    working=$((working + 1))
  else
    echo "$mark stays $node $reason"
  fi
done
((working > 0)) && exit 75
exit 76
