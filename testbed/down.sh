#!/usr/bin/env bash
# Stop every process testbed/up.sh started (pid files, process-group kill) and check that
# none is left, then undo what the real node changed on the host (host.sh: its pods'
# processes, mounts, cgroups, iptables chains, sysctls, the bridge, fixed paths).
# Idempotent. Keeps logs and state in $STRATCTL_TESTBED_DIR for inspection (up.sh wipes
# them on the next start).
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=host.sh
source "$TESTBED_SRC/host.sh"

[[ -d $RUN_DIR ]] || { tb_log "down (nothing to stop)"; exit 0; }

ours() { pid_alive "$1" && tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$RUN_DIR/"; }

# The real node's kubelet first, so that it starts no container while its pods are killed.
if [[ -d $HOST_JOURNAL ]]; then
  pid=$(component_pid kubelet)
  if ours "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do pid_alive "$pid" || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null
  fi
  host_kill_pods
fi

pids=()
for (( i = ${#COMPONENTS[@]} - 1; i >= 0; i-- )); do
  c=${COMPONENTS[$i]}
  pid=$(component_pid "$c")
  # Only if that pid is still ours (its command line names our state dir): pids get reused.
  if ours "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    pids+=("$pid")
  fi
done
# Anything else still running with our state dir on its command line (e.g. a pid file lost).
leftovers() { pgrep -f -- "$RUN_DIR/" 2>/dev/null | grep -vx "$$" || true; }
# (containerd's shims name our state dir on their command line)
for pid in $(leftovers); do kill -TERM "$pid" 2>/dev/null; done

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
host_undo || { tb_log "the host is not as it was: run down.sh again (or see the lines above)"; exit 1; }
