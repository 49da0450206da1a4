#!/usr/bin/env bash
# Control-plane faults on the running local testbed (see testbed/README.md, "Faults").
#
#   fault.sh apiserver-restart DOWN_SECONDS  SIGKILL kube-apiserver, wait, start it again from its
#                                            own command line, wait for /readyz
#   fault.sh apiserver-stop                  SIGKILL kube-apiserver, keeping its command line and
#                                            environment in $RUN_DIR/fault/
#   fault.sh apiserver-start [TIMEOUT]       start it again from what apiserver-stop kept; wait for
#                                            /readyz (default 60 s)
#   fault.sh etcd-pause SECONDS              SIGSTOP etcd, sleep, SIGCONT (SIGCONT on INT/TERM too)
#   fault.sh etcd-stop | etcd-cont           the two halves, for a pause in the background
#   fault.sh restore                         etcd continued, kube-apiserver running and ready (and,
#                                            after an API server restart, kube-controller-manager,
#                                            Volcano's controllers and scheduler started again:
#                                            see component_restart)
#   fault.sh status                          one line per component: running / paused / stopped
#
# Idempotent: stopping what is stopped, continuing what runs, starting what is ready succeed.
# Exit codes: 0 done; 1 the testbed is not up, a process is not ours, or the API server did
# not become ready (its last log lines on stderr); 2 usage.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FAULT_DIR=$RUN_DIR/fault
PKI=$RUN_DIR/pki

help_text() { sed -n '2,/^# not become ready/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
usage() { # [exit code]
  local code=${1:-2}
  if (( code == 0 )); then help_text; else help_text >&2; fi
  exit "$code"
}
die() { tb_log "fault: $*"; exit 1; }
say() { tb_log "fault: $*"; }

number() { [[ ${1:-} =~ ^[0-9]+([.][0-9]+)?$ ]]; }

# The pid of a component if it is alive and ours (its command line names our state dir:
# pids get reused); empty otherwise.
our_pid() {
  local pid
  pid=$(component_pid "$1")
  if pid_alive "$pid" && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$RUN_DIR/"; then
    echo "$pid"
  fi
}

# Serialise with up.sh/down.sh (same lock): neither may restart the testbed under a fault.
lock() {
  [[ -d $RUN_DIR/pids ]] || die "the testbed is not up (no $RUN_DIR/pids); run testbed/up.sh"
  exec 8>"$RUN_DIR/.lock"
  flock -w 120 8 || die "could not take $RUN_DIR/.lock within 120 s (testbed/up.sh or down.sh running?)"
}
unlock() { exec 8>&-; }

# ---------------------------------------------------------------- kube-apiserver
apiserver_ready() {
  curl -sf --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "$APISERVER_URL/readyz" >/dev/null 2>&1
}

apiserver_stop() {
  local pid
  pid=$(our_pid kube-apiserver)
  if [[ -z $pid ]]; then
    [[ -s $FAULT_DIR/kube-apiserver.cmdline ]] ||
      die "kube-apiserver is not running and no command line was kept (testbed down? run testbed/up.sh)"
    say "kube-apiserver already stopped"
    return 0
  fi
  mkdir -p "$FAULT_DIR"
  # Its exact command line and environment, read before it dies.
  cat "/proc/$pid/cmdline" > "$FAULT_DIR/kube-apiserver.cmdline.tmp"
  cat "/proc/$pid/environ" > "$FAULT_DIR/kube-apiserver.environ.tmp"
  [[ -s $FAULT_DIR/kube-apiserver.cmdline.tmp ]] || die "could not read /proc/$pid/cmdline"
  mv "$FAULT_DIR/kube-apiserver.environ.tmp" "$FAULT_DIR/kube-apiserver.environ"
  mv "$FAULT_DIR/kube-apiserver.cmdline.tmp" "$FAULT_DIR/kube-apiserver.cmdline"
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  local deadline=$(( $(date +%s) + 10 ))
  while pid_alive "$pid"; do
    (( $(date +%s) < deadline )) || die "kube-apiserver (pid $pid) survived SIGKILL for 10 s"
    sleep 0.1
  done
  echo "$(date -u +%FT%TZ) fault.sh: kube-apiserver (pid $pid) killed (SIGKILL)" >> "$RUN_DIR/logs/kube-apiserver.log"
  say "kube-apiserver (pid $pid) killed"
}

apiserver_start() {
  local timeout=${1:-60} pid
  number "$timeout" || { echo "fault.sh: TIMEOUT must be a number of seconds, not '$timeout'" >&2; exit 2; }
  pid=$(our_pid kube-apiserver)
  if [[ -z $pid ]]; then
    [[ -s $FAULT_DIR/kube-apiserver.cmdline ]] ||
      die "kube-apiserver is not running and no command line was kept by apiserver-stop"
    local -a cmd env
    mapfile -d '' cmd < "$FAULT_DIR/kube-apiserver.cmdline"
    env=()
    [[ -s $FAULT_DIR/kube-apiserver.environ ]] && mapfile -d '' env < "$FAULT_DIR/kube-apiserver.environ"
    echo "$(date -u +%FT%TZ) fault.sh: starting kube-apiserver again from its command line" \
      >> "$RUN_DIR/logs/kube-apiserver.log"
    # As up.sh's start: own session (down.sh kills the group), log appended, pid file updated.
    # Every other descriptor is closed first: it must hold neither the testbed lock (fd 8)
    # nor a lock of whoever called this script (`flock FILE fault.sh ...` passes its fd on,
    # and a long-lived API server would keep FILE locked for good). `env -i` restores the
    # environment exactly; setsid and env exec, so $! is the API server's pid.
    (
      for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        (( fd > 2 )) && eval "exec $fd>&-"
      done
      exec setsid env -i "${env[@]}" "${cmd[@]}"
    ) >>"$RUN_DIR/logs/kube-apiserver.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" > "$RUN_DIR/pids/kube-apiserver.pid"
    say "kube-apiserver started again (pid $pid)"
  fi
  local start=$SECONDS deadline=$(( $(date +%s) + ${timeout%.*} ))
  until apiserver_ready; do
    if ! pid_alive "$pid"; then
      tb_log "fault: kube-apiserver (pid $pid) exited; last lines of $RUN_DIR/logs/kube-apiserver.log:"
      tail -n 30 "$RUN_DIR/logs/kube-apiserver.log" >&2 || true
      exit 1
    fi
    if (( $(date +%s) >= deadline )); then
      tb_log "fault: kube-apiserver (pid $pid) not ready after ${timeout} s; last lines of its log:"
      tail -n 30 "$RUN_DIR/logs/kube-apiserver.log" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
  say "kube-apiserver ready (pid $pid, $(( SECONDS - start )) s)"
}

# ---------------------------------------------------------------- Volcano
# Volcano 1.14's controllers can keep a stale job cache for minutes after the API server
# restarted ("Failed to get job ... from cache": new jobs get no PodGroup). `restore` starts
# them again from their own command lines, so the tests after a fault find a working
# cluster; the fault tests themselves run before it, against the stale controllers.
component_restart() { # name: SIGTERM its group, start it again from its command line
  local name=$1 pid
  pid=$(our_pid "$name")
  [[ -n $pid ]] || die "$name is not running (testbed down? run testbed/up.sh)"
  local -a cmd env
  mapfile -d '' cmd < "/proc/$pid/cmdline"
  mapfile -d '' env < "/proc/$pid/environ"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  local deadline=$(( $(date +%s) + 10 ))
  while pid_alive "$pid"; do
    if (( $(date +%s) >= deadline )); then kill -KILL -- "-$pid" 2>/dev/null || true; fi
    sleep 0.1
  done
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      (( fd > 2 )) && eval "exec $fd>&-"
    done
    exec setsid env -i "${env[@]}" "${cmd[@]}"
  ) >>"$RUN_DIR/logs/$name.log" 2>&1 </dev/null &
  echo "$!" > "$RUN_DIR/pids/$name.pid"
  say "$name started again (pid $!)"
}

# ---------------------------------------------------------------- etcd
etcd_pid() {
  local pid
  pid=$(our_pid etcd)
  [[ -n $pid ]] || die "etcd is not running (testbed down? run testbed/up.sh)"
  echo "$pid"
}
proc_state() { awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true; }

etcd_stop() {
  local pid
  pid=$(etcd_pid)
  kill -STOP -- "-$pid" 2>/dev/null || kill -STOP "$pid"
  local _
  for _ in $(seq 50); do [[ $(proc_state "$pid") == T ]] && break; sleep 0.02; done
  [[ $(proc_state "$pid") == T ]] || die "etcd (pid $pid) did not stop"
  say "etcd (pid $pid) paused (SIGSTOP)"
}

etcd_cont() {
  local pid
  pid=$(etcd_pid)
  kill -CONT -- "-$pid" 2>/dev/null || kill -CONT "$pid"
  local deadline=$(( $(date +%s) + 20 ))
  until curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || die "etcd (pid $pid) continued but not healthy after 20 s"
    sleep 0.1
  done
  say "etcd (pid $pid) continued (SIGCONT), healthy"
}

status() {
  local pid
  pid=$(our_pid etcd)
  if [[ -z $pid ]]; then echo "etcd: not running"
  elif [[ $(proc_state "$pid") == T ]]; then echo "etcd: paused (pid $pid)"
  else echo "etcd: running (pid $pid)"; fi
  pid=$(our_pid kube-apiserver)
  if [[ -z $pid ]]; then
    if [[ -s $FAULT_DIR/kube-apiserver.cmdline ]]; then echo "kube-apiserver: stopped (apiserver-start restarts it)"
    else echo "kube-apiserver: not running"; fi
  elif apiserver_ready; then echo "kube-apiserver: ready (pid $pid)"
  else echo "kube-apiserver: running, not ready (pid $pid)"; fi
}

# ---------------------------------------------------------------- main
cmd=${1:-}
[[ -n $cmd ]] || usage
shift
case $cmd in
  apiserver-restart)
    (( $# == 1 )) && number "$1" || { echo "usage: fault.sh apiserver-restart DOWN_SECONDS" >&2; exit 2; }
    lock
    apiserver_stop
    sleep "$1"
    apiserver_start 60
    ;;
  apiserver-stop)
    (( $# == 0 )) || usage
    lock; apiserver_stop
    ;;
  apiserver-start)
    (( $# <= 1 )) || usage
    lock; apiserver_start "${1:-60}"
    ;;
  etcd-pause)
    (( $# == 1 )) && number "$1" || { echo "usage: fault.sh etcd-pause SECONDS" >&2; exit 2; }
    lock
    etcd_stop
    # never leave etcd stopped: continue it if this script is interrupted
    trap 'trap - INT TERM; kill -CONT -- "-$(component_pid etcd)" 2>/dev/null; exit 130' INT TERM
    sleep "$1" & wait $! || true
    trap - INT TERM
    etcd_cont
    ;;
  etcd-stop)
    (( $# == 0 )) || usage
    lock; etcd_stop
    ;;
  etcd-cont)
    (( $# == 0 )) || usage
    lock; etcd_cont
    ;;
  restore)
    (( $# == 0 )) || usage
    lock
    etcd_cont
    [[ -n $(our_pid kube-apiserver) || -s $FAULT_DIR/kube-apiserver.cmdline ]] || die "kube-apiserver is not running and no command line was kept (run testbed/up.sh)"
    apiserver_start 60
    if [[ -s $FAULT_DIR/kube-apiserver.cmdline ]]; then  # the API server was restarted: so are Volcano's,
      # and kube-controller-manager, whose job controller (batch/v1 Jobs: Indexed trials, merged
      # blocks) was seen creating no pod for over 60 s after an API server stop and start
      component_restart kube-controller-manager
      component_restart vc-controller-manager
      component_restart vc-scheduler
      rm -f "$FAULT_DIR/kube-apiserver.cmdline"
    fi
    ;;
  status)
    (( $# == 0 )) || usage
    [[ -d $RUN_DIR/pids ]] || die "the testbed is not up (no $RUN_DIR/pids)"
    status
    ;;
  -h|--help|help) usage 0 ;;
  *) echo "fault.sh: unknown command '$cmd'" >&2; usage ;;
esac
