#!/usr/bin/env bash
# Stop every process testbed/up.sh started (pid files, process-group kill) and check that
# none is left. Idempotent. Keeps logs and state in $STRATCTL_TESTBED_DIR for inspection
# (up.sh wipes them on the next start).
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ -d $RUN_DIR ]] || { tb_log "down (nothing to stop)"; exit 0; }

pids=()
for (( i = ${#COMPONENTS[@]} - 1; i >= 0; i-- )); do
  c=${COMPONENTS[$i]}
  pid=$(component_pid "$c")
  # Only if that pid is still ours (its command line names our state dir): pids get reused.
  if pid_alive "$pid" && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$RUN_DIR/"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    pids+=("$pid")
  fi
done
# Anything else still running with our state dir on its command line (e.g. a pid file lost).
leftovers() { pgrep -f -- "$RUN_DIR/" 2>/dev/null | grep -vx "$$" || true; }

deadline=$(( $(date +%s) + 10 ))
while :; do
  alive=()
  for pid in "${pids[@]}"; do pid_alive "$pid" && alive+=("$pid"); done
  for pid in $(leftovers); do alive+=("$pid"); done
  (( ${#alive[@]} == 0 )) && break
  if (( $(date +%s) >= deadline )); then
    for pid in "${alive[@]}"; do kill -KILL -- "-$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
    sleep 0.5
    left=$(leftovers)
    if [[ -n $left ]]; then tb_log "processes still alive: $left"; exit 1; fi
    break
  fi
  sleep 0.2
done
# Stopped components are orphans; wait (briefly) until init has reaped them too, so that
# `pgrep` does not even see zombies.
for _ in $(seq 50); do
  z=0
  for pid in "${pids[@]}"; do [[ -e /proc/$pid ]] && z=1; done
  (( z == 0 )) && break
  sleep 0.1
done
rm -f "$RUN_DIR"/pids/*.pid
tb_log "down (stopped ${#pids[@]} processes)"
