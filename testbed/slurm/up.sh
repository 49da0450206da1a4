#!/usr/bin/env bash
# Start the local Slurm testbed: munged -> slurmctld -> one slurmd per node (sn1..snN, all on
# this host, each on its own port), as plain background processes. Config, state, spool,
# logs, pid files and the fake GPU devices all live in the run directory
# (${STRATCTL_SLURM_RUN:-$HOME/.cache/stratctl/slurm-run}). Needs the Debian packages
# (testbed/slurm/packages.sh) and root.
#
# Idempotent: when already up and healthy it only prints the env file again. When not, it
# restarts, keeping the controller's saved state (the queue) if the config is unchanged;
# STRATCTL_SLURM_FRESH=1 always wipes the state and restarts.
# The last line of output is the path of an env file: source "$(bash up.sh | tail -1)".
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

T0=${EPOCHREALTIME/./}
elapsed() { local d=$(( (${EPOCHREALTIME/./} - T0) / 100000 )); printf '%d.%ds' $(( d / 10 )) $(( d % 10 )); }

for cmd in munged mungekey slurmctld slurmd sinfo scontrol; do
  command -v "$cmd" >/dev/null || { sl_log "$cmd not found: run testbed/slurm/packages.sh first"; exit 1; }
done
(( EUID == 0 )) || { sl_log "must run as root (SlurmUser=root)"; exit 1; }

mkdir -p "$RUN"
exec 8>"$RUN/.lock"
flock 8

export SLURM_CONF=$CONF

# ---------------------------------------------------------------- already up?
node_states() { sinfo -h -N -o '%N %T' 2>/dev/null | sort -u; }
healthy() {
  local d states
  [[ -s $ENV_FILE ]] || return 1
  for d in $(daemons); do pid_alive "$(daemon_pid "$d")" || return 1; done
  # The config it runs with is the one we would write now.
  local tmp; tmp=$(mktemp -d)
  bash "$SLURM_SRC/gen-conf.sh" "$tmp"
  cmp -s "$tmp/slurm.conf" "$CONF" && cmp -s "$tmp/gres.conf" "$RUN/etc/gres.conf" || { rm -rf "$tmp"; return 1; }
  rm -rf "$tmp"
  timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP' || return 1
  # Every node registered and usable (busy is fine).
  states=$(node_states) || return 1
  [[ $(wc -l <<<"$states") -eq $NODES ]] || return 1
  ! grep -qvE ' (idle|mixed|allocated|completing|planned)$' <<<"$states"
}
if [[ ${STRATCTL_SLURM_FRESH:-0} != 1 ]] && healthy; then
  sl_log "already up (run directory $RUN)"
  echo "$ENV_FILE"
  exit 0
fi
if compgen -G "$RUN/pids/*.pid" >/dev/null; then
  sl_log "stopping the previous daemons first"
  bash "$SLURM_SRC/down.sh" >&2
fi

# ---------------------------------------------------------------- config and state
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash "$SLURM_SRC/gen-conf.sh" "$tmp"
if [[ ${STRATCTL_SLURM_FRESH:-0} == 1 ]] || ! cmp -s "$tmp/slurm.conf" "$CONF" || ! cmp -s "$tmp/gres.conf" "$RUN/etc/gres.conf"; then
  sl_log "fresh state in $RUN"
  find "$RUN" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
fi
mkdir -p "$RUN"/{etc,state,run,log,pids,dev} "$RUN/munge"
chmod 755 "$RUN" "$RUN/munge"  # munged wants its socket's directory searchable by all
cp "$tmp/slurm.conf" "$tmp/gres.conf" "$RUN/etc/"
for n in $(node_names); do
  mkdir -p "$RUN/spool/$n" "$RUN/dev/$n"
  for (( g = 0; g < GPUS_PER_NODE; g++ )); do
    # Slurm checks that a gres File= is a character device; 1,3 is /dev/null's.
    [[ -c $RUN/dev/$n/gpu$g ]] || { rm -f "$RUN/dev/$n/gpu$g"; mknod "$RUN/dev/$n/gpu$g" c 1 3; }
  done
done
[[ -s $RUN/munge/munge.key ]] || mungekey --create --keyfile="$RUN/munge/munge.key" --bits=1024
chmod 600 "$RUN/munge/munge.key"

port_free() { ! (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for (( p = CTLD_PORT; p < SLURMD_PORT + NODES; p++ )); do
  port_free "$p" || { sl_log "port 127.0.0.1:$p is in use (override with STRATCTL_SLURM_CTLD_PORT / STRATCTL_SLURM_SLURMD_PORT)"; exit 1; }
done

# ---------------------------------------------------------------- start
fail() {
  sl_log "$*"
  local f
  echo "---- sinfo -N" >&2
  timeout 10 sinfo -N -o '%N %G %T %P %E' >&2 || true
  for f in "$RUN"/log/*.log; do
    [[ -s $f ]] || continue
    echo "---- tail of $f" >&2
    tail -n 15 "$f" >&2
  done
  exit 1
}
# A daemon in the foreground (-D/-F), in its own session, detached from our stdout; its pid
# file is ours ($RUN/pids), written at once. env and setsid exec, so $! is the daemon.
start() {
  local name=$1; shift
  env "$MARKER" SLURM_CONF="$CONF" setsid "$@" </dev/null >>"$RUN/log/$name.out" 2>&1 8>&- &  # the daemon must not hold the lock
  echo $! >"$RUN/pids/$name.pid"
}
wait_for() {  # seconds, description, command...
  local secs=$1 what=$2; shift 2
  local deadline=$(( ${EPOCHREALTIME/./} + secs * 1000000 ))
  until "$@" >/dev/null 2>&1; do
    (( ${EPOCHREALTIME/./} < deadline )) || fail "timed out after ${secs}s waiting for $what"
    sleep 0.2
  done
}

# --force: /root (the default run directory's parent) is not searchable by all, which munged
# refuses without it; every client here is root, so it does not matter.
start munged munged --foreground --force --socket="$MUNGE_SOCKET" --key-file="$RUN/munge/munge.key" \
  --pid-file="$RUN/run/munged.pid" --log-file="$RUN/log/munged.log" --seed-file="$RUN/munge/munged.seed"
munge_ok() { munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET"; }
wait_for 10 munged munge_ok

start slurmctld slurmctld -D -f "$CONF"
ctld_up() { pid_alive "$(daemon_pid slurmctld)" || fail "slurmctld exited"; scontrol ping | grep -q 'is UP'; }
wait_for 30 slurmctld ctld_up

for n in $(node_names); do
  start "slurmd-$n" slurmd -D -N "$n" -f "$CONF"
done

# All nodes idle (or busy, for a queue recovered from the saved state). A node that is
# responding but DOWN/INVAL (e.g. its gres changed) is resumed once.
resumed=()
nodes_ready() {
  local n states
  for n in $(node_names); do pid_alive "$(daemon_pid "slurmd-$n")" || fail "slurmd for $n exited"; done
  states=$(node_states)
  [[ $(wc -l <<<"$states") -eq $NODES ]] || return 1
  while read -r n s; do
    if [[ $s =~ ^(down|inval|drained|draining)$ && " ${resumed[*]} " != *" $n "* ]]; then
      scontrol update nodename="$n" state=resume >&2 || true
      resumed+=("$n")
    fi
  done <<<"$states"
  ! grep -qvE ' (idle|mixed|allocated|completing|planned)$' <<<"$states"
}
wait_for 60 "the nodes to be idle" nodes_ready

cat >"$ENV_FILE" <<ENV
# The local Slurm testbed (testbed/slurm/up.sh): source this, then sinfo, squeue, sbatch...
export SLURM_CONF=$CONF
export STRATCTL_SLURM_RUN=$RUN
ENV
sl_log "up in $(elapsed): $NODES nodes x $GPUS_PER_NODE GPUs, partitions research (default) and prod (preempts research); run directory $RUN"
echo "$ENV_FILE"
