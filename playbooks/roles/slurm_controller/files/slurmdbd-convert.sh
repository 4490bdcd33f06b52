#!/bin/bash
# Run slurmdbd in the foreground until it answers sacctmgr: on its first start after a major
# upgrade it converts the accounting database, which can take hours on a large one, and under
# systemd a start timeout would kill it half-way (https://slurm.schedmd.com/upgrades.html).
# Then stop it, so systemd starts it. A slurmdbd already running in the foreground (a run that
# was cut off) is waited for, never started twice. Past the timeout it is left converting.
#   slurmdbd-convert.sh LOG TIMEOUT_SECONDS
set -u
log=$1
timeout=$2
PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

pid=$(pgrep -f '^slurmdbd -D' | head -n 1)
if [ -z "$pid" ]; then
  echo "=== $(date -u +%FT%TZ) slurmdbd $(slurmdbd -V 2>&1) in the foreground" >>"$log"
  setsid slurmdbd -D -v >>"$log" 2>&1 </dev/null &
  pid=$!
fi
deadline=$((SECONDS + timeout))
until sacctmgr --noheader list cluster format=cluster >/dev/null 2>&1; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "slurmdbd stopped before it answered; its log ($log) ends:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  if [ "$SECONDS" -gt "$deadline" ]; then
    echo "slurmdbd (pid $pid) still converts after ${timeout}s; it is left running (log $log):" \
      "wait for it to answer sacctmgr, then apply again" >&2
    exit 1
  fi
  sleep 2
done
kill -TERM "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 1; done
echo "slurmdbd converted the database and answered; stopped, for systemd to start"
grep -iE 'conver|upgrad' "$log" | tail -n 20
exit 0
