#!/usr/bin/env bash
# Run a bash script as a gang on the local YARN testbed with stratctl's own application
# master (yarn-am/, io.stratctl.yarn.GangMaster), through the RM REST API alone: what
# stratctl's YARN backend does for a trial, by hand (see README.md, "stratctl's gang AM").
#
#   bash testbed/yarn/gang.sh [-q QUEUE] [-n N] [-g GPUS] [-m MB] [-c VCORES] [-N NAME]
#        [-t TAG]... [-p spread|pack] [-T GANG_TIMEOUT] [--no-wait] -- 'SCRIPT'
#
# SCRIPT (any bash) runs in each of N containers (MB memory, VCORES vcores, GPUS yarn.io/gpu
# each) of one role, worker, all started together once all N are allocated, each with the
# rendezvous contract (STRATCTL_TASK_INDEX 0..N-1, STRATCTL_NODE_ADDRS, MASTER_ADDR, and
# MASTER_PORT 20000 + the application's number, as stratctl derives it). The AM
# takes 512 MB and 1 vcore in QUEUE (research by default). Tags: stratctl, stratctl-smoke and
# each -t. Prints the application id; unless --no-wait, waits for the end, prints
# "<id> <state> <finalStatus>", the diagnostics (stderr) and each container's stdout.
# Exit status 0 only if the application SUCCEEDED.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

queue=research num=1 gpus=0 mem=256 vcores=1 name=stratctl-gang wait=1 placement='' timeout=0
tags=(stratctl stratctl-smoke)
while (( $# )); do
  case $1 in
    -q) queue=$2; shift 2 ;;
    -n) num=$2; shift 2 ;;
    -g) gpus=$2; shift 2 ;;
    -m) mem=$2; shift 2 ;;
    -c) vcores=$2; shift 2 ;;
    -N) name=$2; shift 2 ;;
    -t) tags+=("$2"); shift 2 ;;
    -p) placement=$2; shift 2 ;;
    -T) timeout=$2; shift 2 ;;
    --no-wait) wait=0; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
(( $# == 1 )) || { sed -n '2,17s/^# \{0,1\}//p' "$0" >&2; exit 2; }
script=$1
[[ -s $ENV_FILE && -e $RUN/ready ]] || { yl_log "not up: run testbed/yarn/up.sh first"; exit 1; }
# shellcheck disable=SC1090
source "$ENV_FILE"
jar=${STRATCTL_YARN_AM_JAR:-$(bash "$YARN_SRC/../../yarn-am/build.sh" | tail -n 1)}
[[ -s $jar ]] || { yl_log "no AM jar at $jar (yarn-am/build.sh)"; exit 1; }
api=$STRATCTL_YARN_RM/ws/v1/cluster
user=$(id -un)

# 1. An application id.
app=$(curl -sf -X POST "$api/apps/new-application?user.name=$user" | jq -r '."application-id"')
[[ $app == application_* ]] || { yl_log "new-application failed"; exit 1; }

# 2. The AM's classpath as the cluster says it (yarn.application.classpath, comma separated),
#    after the AM jar, localized into the AM's working directory (./*).
cp=$(curl -sf -H 'Accept: application/json' "$STRATCTL_YARN_RM/conf?name=yarn.application.classpath" \
  | jq -r '.property.value')
[[ -n $cp && $cp != null ]] || { yl_log "yarn.application.classpath not in $STRATCTL_YARN_RM/conf"; exit 1; }
classpath="./*:${cp//,/:}"

# 3. The submission. The jar is a local resource from this file system: its size and its
#    mtime in exact ms must match. The NM puts the AM command into bash -c "..." as it is.
size=$(stat -c %s "$jar")
mtime_ms=$(date -r "$jar" +%s%3N)
am_cmd="java -Xmx128m io.stratctl.yarn.GangMaster"  # classpath: $CLASSPATH of its environment
am_cmd+=" 1><LOG_DIR>/AppMaster.stdout 2><LOG_DIR>/AppMaster.stderr"
res="memory-mb=$mem,vcores=$vcores"
(( gpus > 0 )) && res+=",yarn.io/gpu=$gpus"
dir=$RUN/gang/$app
mkdir -p "$dir"
jq -n --arg app "$app" --arg name "$name" --arg queue "$queue" --arg cmd "$am_cmd" \
  --arg cp "$classpath" --arg jar "file://$jar" --argjson size "$size" --argjson ts "$mtime_ms" \
  --arg roles "worker:$num" --arg res "$res" --arg script "$(printf '%s\n' "$script" | base64 -w0)" \
  --arg placement "$placement" --arg timeout "$timeout" --arg port "$(( 20000 + 10#${app##*_} % 20000 ))" \
  --argjson tags "$(printf '%s\n' "${tags[@]}" | jq -R . | jq -s .)" '{
  "application-id": $app, "application-name": $name, "queue": $queue,
  "application-type": "STRATCTL", "application-tags": {"tag": $tags},
  "max-app-attempts": 2, "unmanaged-AM": false,
  "keep-containers-across-application-attempts": false,
  "resource": {"memory": 512, "vCores": 1},
  "am-container-spec": {
    "local-resources": {"entry": [{"key": "stratctl-yarn-am.jar", "value": {
      "resource": $jar, "type": "FILE", "visibility": "APPLICATION",
      "size": $size, "timestamp": $ts}}]},
    "commands": {"command": $cmd},
    "environment": {"entry": [
      {"key": "CLASSPATH", "value": $cp},
      {"key": "STRATCTL_AM_ROLES", "value": $roles},
      {"key": "STRATCTL_AM_RESOURCES_0", "value": $res},
      {"key": "STRATCTL_AM_SCRIPT_0", "value": $script},
      {"key": "STRATCTL_AM_MASTER_PORT", "value": $port},
      {"key": "STRATCTL_AM_PLACEMENT", "value": $placement},
      {"key": "STRATCTL_AM_GANG_TIMEOUT", "value": $timeout}]}
  }}' >"$dir/submit.json"
# 4. Submit $dir/submit.json; unless --no-wait, wait for the end, show the diagnostics and
#    what each container printed (exit status 0 only if the application SUCCEEDED).
submit_and_wait "$dir" "$app" "$wait"
