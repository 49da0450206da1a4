#!/usr/bin/env bash
# Stop the local YARN testbed started by up.sh: the JVM by its pid file (TERM, which stops the
# MiniYARNCluster; KILL when that takes longer than STRATCTL_YARN_STOP_GRACE seconds, 5 by
# default: with applications running a clean stop takes 10-30 s and buys nothing, as a
# MiniYARNCluster keeps no state), then every container process left behind (application
# masters and their containers run in their own sessions). Those are found by their
# environment, never by name: the NodeManagers give each container LOG_DIRS under
# $RUN/target. Idempotent. The run directory stays (logs); up.sh starts an empty cluster.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
GRACE=${STRATCTL_YARN_STOP_GRACE:-5}

[[ -d $RUN ]] || exit 0
rm -f "$RUN/ready"

containers() {  # pids whose environment says they are a container of this testbed
  local e p
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [[ $p == "$$" ]] && continue
    { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qE "^LOG_DIRS=$RUN/target/" && echo "$p"
  done
  return 0
}

pid=$(daemon_pid)
if pid_alive "$pid"; then
  kill -TERM "$pid" 2>/dev/null || true
  for (( i = 0; i < GRACE * 5; i++ )); do pid_alive "$pid" || break; sleep 0.2; done
  if pid_alive "$pid"; then
    yl_log "the JVM (pid $pid) still stopping after ${GRACE}s: killing it"
    kill -KILL "$pid" 2>/dev/null || true
    for (( i = 0; i < 50; i++ )); do pid_alive "$pid" || break; sleep 0.1; done
  fi
fi
rm -f "$PID_FILE"

mapfile -t left < <(containers)
if (( ${#left[@]} )); then
  yl_log "killing ${#left[@]} leftover container process(es)"
  kill -KILL "${left[@]}" 2>/dev/null || true
fi
yl_log "down"
