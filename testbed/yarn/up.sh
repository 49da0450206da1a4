#!/usr/bin/env bash
# Start the local YARN testbed: one JVM running Hadoop's MiniYARNCluster (src/MiniYarn.java),
# a real ResourceManager with the Capacity Scheduler (queues prod 70% and research 30% with
# maximum-capacity 100%, preemption on) and $NODES NodeManagers, each declaring 4 GPUs
# (yarn.io/gpu), 8 vcores and 16 GiB. The RM REST API is on a fixed port (28088).
# Config, logs, pid file and the NodeManagers' dirs live in the run directory
# (${STRATCTL_YARN_RUN:-$HOME/.cache/stratctl/yarn-run}); jars and the compiled class in
# ${STRATCTL_YARN_CACHE:-$HOME/.cache/stratctl/yarn} (packages.sh, run from here).
#
# Idempotent: when already up and healthy it only prints the env file again. Otherwise it
# (re)starts the JVM; a MiniYARNCluster keeps no state across restarts (no RM recovery),
# so every start is an empty cluster. STRATCTL_YARN_FRESH=1 also wipes the run directory.
# The last line of output is the path of an env file: source "$(bash up.sh | tail -1)".
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

T0=${EPOCHREALTIME/./}
elapsed() { local d=$(( (${EPOCHREALTIME/./} - T0) / 100000 )); printf '%d.%ds' $(( d / 10 )) $(( d % 10 )); }

mkdir -p "$RUN"
exec 8>"$RUN/.lock"
flock 8

# ---------------------------------------------------------------- already up?
rest() { curl -sf --max-time 5 "$RM_URL/ws/v1/cluster/$1"; }
running_nodes() { rest nodes | grep -o '"state":"RUNNING"' | wc -l; }
cluster_ok() {
  rest info | grep -q '"state":"STARTED"' || return 1
  [[ $(running_nodes) -eq $NODES ]]
}
healthy() {
  [[ -s $ENV_FILE && -e $RUN/ready ]] || return 1
  pid_alive "$(daemon_pid)" || return 1
  [[ $(fingerprint) == "$(cat "$RUN/fingerprint" 2>/dev/null)" ]] || return 1
  # The jars/class it was built from are still the cache's (packages.sh would rebuild).
  [[ $(cat "$CLASSES/.src.sha256" 2>/dev/null) == "$(cat "$RUN/fingerprint.class" 2>/dev/null)" ]] || return 1
  cluster_ok
}
if [[ ${STRATCTL_YARN_FRESH:-0} != 1 ]] && healthy; then
  bash "$YARN_SRC/../../yarn-am/build.sh" >/dev/null  # the AM is not part of the JVM: rebuilt, no restart
  yl_log "already up: $RM_URL (run directory $RUN)"
  echo "$ENV_FILE"
  exit 0
fi
if [[ -e $PID_FILE ]]; then
  yl_log "stopping the previous JVM first"
  bash "$YARN_SRC/down.sh" >&2
fi

bash "$YARN_SRC/packages.sh"
AM_JAR=$(bash "$YARN_SRC/../../yarn-am/build.sh" | tail -n 1)  # stratctl's gang application master

# ---------------------------------------------------------------- run directory
if [[ ${STRATCTL_YARN_FRESH:-0} == 1 ]]; then
  yl_log "fresh run directory $RUN"
  find "$RUN" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
fi
# The previous cluster's NodeManager dirs (container logs included): a new JVM starts empty.
rm -rf "$RUN/target"
mkdir -p "$RUN"/{etc,log,pids}
rm -f "$RUN/ready" "$RUN/rm-address" "$ENV_FILE"
[[ -s $LOG ]] && mv -f "$LOG" "$LOG.1"
cat >"$RUN/etc/log4j.properties" <<'LOG4J'
log4j.rootLogger=INFO,stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{2}: %m%n
# Chatty and useless here.
log4j.logger.org.apache.hadoop.yarn.server.resourcemanager.monitor.capacity=WARN
log4j.logger.org.apache.hadoop.metrics2=WARN
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
LOG4J
cat >"$RUN/etc/log4j-client.properties" <<'LOG4J'
log4j.rootLogger=WARN,stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%d{ISO8601} %-5p %c{2}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
LOG4J
fingerprint >"$RUN/fingerprint"
cp "$CLASSES/.src.sha256" "$RUN/fingerprint.class"

port_free() { ! (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "$WEB_PORT" "$RPC_PORT" $((RPC_PORT + 1)) $((RPC_PORT + 2)) $((RPC_PORT + 3)); do
  port_free "$p" || { yl_log "port 127.0.0.1:$p is in use (override with STRATCTL_YARN_WEB_PORT / STRATCTL_YARN_RPC_PORT)"; exit 1; }
done

# ---------------------------------------------------------------- start
fail() {
  yl_log "$*"
  if [[ -s $LOG ]]; then
    echo "---- errors in $LOG" >&2
    grep -E 'ERROR|FATAL|Exception|MiniYarn:' "$LOG" | head -n 20 >&2 || true
    echo "---- tail of $LOG" >&2
    tail -n 15 "$LOG" >&2
  fi
  bash "$YARN_SRC/down.sh" >&2 || true
  exit 1
}
# The JVM in its own session, cwd the run directory (MiniYARNCluster works in ./target),
# $RUN/etc first on its classpath (capacity-scheduler.xml, read again on -refreshQueues),
# detached from our stdout; its pid file is ours, written at once. exec env ... setsid java:
# $! is the JVM.
(
  cd "$RUN"
  exec env "$MARKER" setsid java -Xms64m -Xmx"$HEAP" -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError \
    -Djava.net.preferIPv4Stack=true \
    -Dlog4j.configuration="file:$RUN/etc/log4j.properties" \
    -Dstratctl.yarn.run="$RUN" -Dstratctl.yarn.nodes="$NODES" -Dstratctl.yarn.gpus="$GPUS_PER_NODE" \
    -Dstratctl.yarn.vcores="$VCORES_PER_NODE" -Dstratctl.yarn.memMb="$MEM_PER_NODE" \
    -Dstratctl.yarn.lib="$LIB" -Dstratctl.yarn.webPort="$WEB_PORT" -Dstratctl.yarn.rpcBase="$RPC_PORT" -Dstratctl.yarn.host="$HOST" \
    -cp "$RUN/etc:$CLASSES:$LIB/*" MiniYarn
) </dev/null >>"$LOG" 2>&1 8>&- &  # the JVM must not hold the lock
echo $! >"$PID_FILE"

wait_for() {  # seconds, description, command...
  local secs=$1 what=$2; shift 2
  local deadline=$(( ${EPOCHREALTIME/./} + secs * 1000000 ))
  until "$@" >/dev/null 2>&1; do
    pid_alive "$(daemon_pid)" || fail "the JVM exited (see $LOG)"
    (( ${EPOCHREALTIME/./} < deadline )) || fail "timed out after ${secs}s waiting for $what"
    sleep 0.2
  done
}
wait_for 120 "the cluster to start" test -e "$RUN/ready"
wait_for 60 "$NODES NodeManagers RUNNING at $RM_URL/ws/v1/cluster/nodes" cluster_ok

cat >"$ENV_FILE" <<ENV
# The local YARN testbed (testbed/yarn/up.sh): source this, then curl \$STRATCTL_YARN_RM/ws/v1/cluster/...
export STRATCTL_YARN_RM=$RM_URL
export STRATCTL_YARN_RM_ADDRESS=$HOST:$((RPC_PORT + 2))
export STRATCTL_YARN_RUN=$RUN
# An application master's classpath (Hadoop's distributed-shell AM, see README.md):
# \$HADOOP_CONF_DIR:\$STRATCTL_YARN_LIB/*:\$STRATCTL_YARN_AM_LIB/*
export STRATCTL_YARN_LIB=$LIB
export STRATCTL_YARN_AM_LIB=$AM_LIB
# stratctl's gang application master (yarn-am/build.sh), which stratctl's YARN backend ships
export STRATCTL_YARN_AM_JAR=$AM_JAR
# NodeManager dirs: <this>/yarn-*/stratctl-logDir-nm-<i>_0/<app>/<container>/{stdout,stderr}
export STRATCTL_YARN_WORK=$RUN/target/test/data/stratctl
# yarn-site.xml with the cluster's effective configuration (for a Hadoop client or an AM).
export HADOOP_CONF_DIR=$RUN/etc
ENV
yl_log "up in $(elapsed): $RM_URL, $NODES NodeManagers x ($GPUS_PER_NODE GPUs, $VCORES_PER_NODE vcores, $MEM_PER_NODE MB), queues prod 70% / research 30% (max 100%), preemption on; run directory $RUN"
echo "$ENV_FILE"
