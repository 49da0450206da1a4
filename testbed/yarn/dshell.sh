#!/usr/bin/env bash
# Run a shell command on the local YARN testbed through the RM REST API alone, with Hadoop's
# distributed-shell application master: a smoke test of the testbed, and the worked example
# of a REST submission for a YARN backend (see README.md).
#
#   bash testbed/yarn/dshell.sh [-q QUEUE] [-n CONTAINERS] [-g GPUS] [-m MB] [-c VCORES]
#                               [-N NAME] [--no-wait] -- 'COMMAND'
#
# COMMAND (any bash, quotes and $ included) is written to a script file under
# $RUN/dshell/<app id>/ and run once in each of CONTAINERS containers (each with MB memory,
# VCORES vcores and GPUS yarn.io/gpu); the AM itself takes 512 MB and 1 vcore in QUEUE.
# Prints the application id; unless --no-wait, waits for the end and prints the final state
# and each container's stdout. Exit status 0 only if the application SUCCEEDED.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

queue=research num=1 gpus=0 mem=256 vcores=1 name=dshell wait=1
while (( $# )); do
  case $1 in
    -q) queue=$2; shift 2 ;;
    -n) num=$2; shift 2 ;;
    -g) gpus=$2; shift 2 ;;
    -m) mem=$2; shift 2 ;;
    -c) vcores=$2; shift 2 ;;
    -N) name=$2; shift 2 ;;
    --no-wait) wait=0; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
(( $# == 1 )) || { sed -n '2,14s/^# \{0,1\}//p' "$0" >&2; exit 2; }
command=$1
[[ -s $ENV_FILE && -e $RUN/ready ]] || { yl_log "not up: run testbed/yarn/up.sh first"; exit 1; }
# shellcheck disable=SC1090
source "$ENV_FILE"
api=$STRATCTL_YARN_RM/ws/v1/cluster
user=$(id -un)

# 1. An application id.
app=$(curl -sf -X POST "$api/apps/new-application?user.name=$user" | jq -r '."application-id"')
[[ $app == application_* ]] || { yl_log "new-application failed"; exit 1; }

# 2. The command as a script file. Hadoop's own script mode (DISTRIBUTEDSHELLSCRIPTLOCATION)
#    fails for a second container on a local file system (the AM renames the script once per
#    container: "Not able to add suffix (.bat/.sh) to the shell script filename"), so the AM
#    gets a shell command instead, "bash <script>", which every container can run as all
#    NodeManagers share this host. The AM reads that command from a file "shellCommands" in
#    its working directory, in DataOutputStream.writeUTF form (2-byte length first): a local
#    resource, localized from this file system by the NodeManager, with its size and
#    modification time (ms), which must match the file.
dir=$RUN/dshell/$app
mkdir -p "$dir"
printf '%s\n' "$command" >"$dir/script.sh"
line="bash $dir/script.sh"
(( ${#line} < 65536 )) || { yl_log "path too long"; exit 1; }
# shellcheck disable=SC2059
printf "$(printf '\\%03o\\%03o' $(( ${#line} / 256 )) $(( ${#line} % 256 )))%s" "$line" >"$dir/shellCommands"
size=$(stat -c %s "$dir/shellCommands")
mtime_ms=$(date -r "$dir/shellCommands" +%s%3N)  # exact: the NodeManager compares ms

# 3. The submission: the AM is a plain java command; its classpath is the cluster's jars,
#    the AM's jars and the directory with yarn-site.xml (how the AM finds the RM). The NM
#    puts the command into `bash -c "..."` as it is: no double quotes in it.
am_cmd="java -Xmx256m org.apache.hadoop.yarn.applications.distributedshell.ApplicationMaster"
am_cmd+=" --num_containers $num --priority 0"
am_cmd+=" --container_resources memory-mb=$mem,vcores=$vcores,yarn.io/gpu=$gpus"
am_cmd+=" 1><LOG_DIR>/AppMaster.stdout 2><LOG_DIR>/AppMaster.stderr"
jq -n --arg app "$app" --arg name "$name" --arg queue "$queue" --arg cmd "$am_cmd" \
  --arg cp "$HADOOP_CONF_DIR:$STRATCTL_YARN_LIB/*:$STRATCTL_YARN_AM_LIB/*" \
  --arg res "file://$dir/shellCommands" --argjson size "$size" --argjson ts "$mtime_ms" '{
  "application-id": $app, "application-name": $name, "queue": $queue,
  "application-type": "YARN", "max-app-attempts": 1, "unmanaged-AM": false,
  "keep-containers-across-application-attempts": false,
  "resource": {"memory": 512, "vCores": 1},
  "am-container-spec": {
    "local-resources": {"entry": [{"key": "shellCommands", "value": {
      "resource": $res, "type": "FILE", "visibility": "APPLICATION",
      "size": $size, "timestamp": $ts}}]},
    "commands": {"command": $cmd},
    "environment": {"entry": [{"key": "CLASSPATH", "value": $cp}]}
  }}' >"$dir/submit.json"
# 4. Submit $dir/submit.json; unless --no-wait, wait for the end, show the diagnostics and
#    what each container printed (exit status 0 only if the application SUCCEEDED).
submit_and_wait "$dir" "$app" "$wait"
