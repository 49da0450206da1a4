# shellcheck shell=bash
# Shared settings for testbed/yarn/{packages,up,down}.sh. Every value can be overridden by env.
YARN_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN=${STRATCTL_YARN_RUN:-$HOME/.cache/stratctl/yarn-run}     # state, config, logs, pid file
CACHE=${STRATCTL_YARN_CACHE:-$HOME/.cache/stratctl/yarn}     # resolved jars and compiled class
LIB=$CACHE/lib
AM_LIB=$CACHE/am-lib   # distributed-shell AM jars: an AM's classpath is $LIB/*:$AM_LIB/*:$RUN/etc
CLASSES=$CACHE/classes

NODES=${STRATCTL_YARN_NODES:-2}                  # NodeManagers in the one JVM
GPUS_PER_NODE=${STRATCTL_YARN_GPUS_PER_NODE:-4}  # yarn.io/gpu, a countable resource (no plugin)
VCORES_PER_NODE=${STRATCTL_YARN_VCORES_PER_NODE:-8}
MEM_PER_NODE=${STRATCTL_YARN_MEM_PER_NODE:-16384}  # MB, declared, not real
WEB_PORT=${STRATCTL_YARN_WEB_PORT:-28088}        # RM REST API and web UI
RPC_PORT=${STRATCTL_YARN_RPC_PORT:-28030}        # RM scheduler; +1 tracker, +2 client (yarn.resourcemanager.address), +3 admin
HEAP=${STRATCTL_YARN_HEAP:-1g}                   # -Xmx of the JVM
HOST=127.0.0.1

RM_URL=http://$HOST:$WEB_PORT
ENV_FILE=$RUN/env
PID_FILE=$RUN/pids/miniyarn.pid
LOG=$RUN/log/miniyarn.log
# Set in the environment of the JVM (and so of the container processes its NodeManagers
# start): down.sh finds stragglers by it, never by name.
MARKER=STRATCTL_YARN_DAEMON_OF=$RUN

yl_log() { echo "yarn testbed: $*" >&2; }

# Alive and not a zombie (orphans may be reparented to a pid 1 that never reaps).
pid_alive() {
  [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null || return 1
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
  [[ $state != Z ]]
}
daemon_pid() { cat "$PID_FILE" 2>/dev/null || true; }

# What the running JVM must have been started with: settings and the sources it was built from.
fingerprint() {
  echo "nodes=$NODES gpus=$GPUS_PER_NODE vcores=$VCORES_PER_NODE mem=$MEM_PER_NODE web=$WEB_PORT rpc=$RPC_PORT heap=$HEAP"
  sha256sum "$YARN_SRC/pom.xml" "$YARN_SRC/src/MiniYarn.java" | awk '{print $1}'
}

# Submit an application (its REST body in DIR/submit.json, id APP) to $STRATCTL_YARN_RM and
# print its id; when WAIT is 1, wait for its end and print its final state, its diagnostics
# (stderr) and each container's stdout; 0 only if it SUCCEEDED (dshell.sh, gang.sh).
submit_and_wait() {  # DIR APP WAIT
  local dir=$1 app=$2 wait=$3 api=$STRATCTL_YARN_RM/ws/v1/cluster user code state f c
  user=$(id -un)
  code=$(curl -s -o "$dir/submit.out" -w '%{http_code}' -H 'Content-Type: application/json' \
    -X POST --data @"$dir/submit.json" "$api/apps?user.name=$user")
  [[ $code == 202 ]] || { yl_log "submit: HTTP $code: $(cat "$dir/submit.out")"; return 1; }
  echo "$app"
  (( wait )) || return 0
  while :; do
    state=$(curl -sf "$api/apps/$app" | jq -r '.app | "\(.state) \(.finalStatus)"') || state="? ?"
    [[ $state == FINISHED* || $state == FAILED* || $state == KILLED* ]] && break
    sleep 0.5
  done
  echo "$app $state"
  curl -sf "$api/apps/$app" | jq -r '.app.diagnostics | select(. != "")' >&2 || true
  for f in "$STRATCTL_YARN_WORK"/yarn-*/*-logDir-nm-*/"$app"/container_*/stdout; do
    [[ -e $f ]] || continue
    c=${f%/stdout}; echo "---- ${c##*/} stdout"; cat "$f"
  done
  [[ $state == "FINISHED SUCCEEDED" ]]
}
