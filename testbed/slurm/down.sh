#!/usr/bin/env bash
# Stop the local Slurm testbed started by up.sh: the daemons by their pid files (slurmd's,
# then slurmctld, which saves its state, then munged), then any slurmstepd left behind with
# its job's processes. Idempotent. State stays in the run directory (up.sh reuses it unless
# STRATCTL_SLURM_FRESH=1).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stop() {  # pid-file name; TERM, then KILL after 10s
  local name=$1 pid i
  pid=$(daemon_pid "$name")
  if pid_alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for (( i = 0; i < 50; i++ )); do pid_alive "$pid" || break; sleep 0.2; done
    if pid_alive "$pid"; then
      sl_log "$name (pid $pid) did not stop on TERM: killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$RUN/pids/$name.pid"
}

[[ -d $RUN/pids ]] || exit 0
for d in $(daemons | tac); do stop "$d"; done
# Pid files of daemons no longer configured (e.g. fewer nodes now).
for f in "$RUN"/pids/*.pid; do [[ -e $f ]] && stop "$(basename "$f" .pid)"; done

# slurmstepd processes outlive slurmd: find them by the marker in their environment (they
# inherit slurmd's), and kill each with its job's process tree.
marked=()
for e in /proc/[0-9]*/environ; do
  pid=${e#/proc/}; pid=${pid%/environ}
  { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qxF "$MARKER" && marked+=("$pid")
done
if (( ${#marked[@]} )); then
  declare -A children=()
  for s in /proc/[0-9]*/stat; do
    { read -r line <"$s"; } 2>/dev/null || continue
    rest=${line##*) }; set -- $rest  # fields after "(comm) ": state ppid ...
    pid=${s#/proc/}; pid=${pid%/stat}
    children[$2]+=" $pid"
  done
  tree=()
  queue=("${marked[@]}")
  while (( ${#queue[@]} )); do
    p=${queue[0]}; queue=("${queue[@]:1}")
    tree+=("$p")
    for c in ${children[$p]:-}; do queue+=("$c"); done
  done
  sl_log "killing ${#tree[@]} leftover job process(es) (slurmstepd and their jobs)"
  kill -KILL "${tree[@]}" 2>/dev/null || true
fi
sl_log "down"
