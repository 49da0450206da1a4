#!/usr/bin/env bash
# The `yarn` command line client against the local YARN testbed, without a Hadoop install:
# the CLI classes of the cached hadoop-client jars, configured by the testbed's yarn-site.xml.
#   bash testbed/yarn/yarn.sh application -list -appStates ALL
#   bash testbed/yarn/yarn.sh application -kill <application id>
#   bash testbed/yarn/yarn.sh node -list -showDetails
#   bash testbed/yarn/yarn.sh queue -status research
#   bash testbed/yarn/yarn.sh rmadmin -refreshQueues
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

(( $# )) || { sed -n '2,8s/^# \{0,1\}//p' "$0" >&2; exit 2; }
[[ -s $ENV_FILE && -e $RUN/ready ]] || { yl_log "not up: run testbed/yarn/up.sh first"; exit 1; }
sub=$1; shift
case $sub in
  application|applicationattempt|container) cls=ApplicationCLI; set -- "$sub" "$@" ;;
  node) cls=NodeCLI; set -- "$sub" "$@" ;;
  queue) cls=QueueCLI; set -- "$sub" "$@" ;;
  rmadmin) cls=RMAdminCLI ;;
  *) yl_log "unknown subcommand $sub (application, applicationattempt, container, node, queue, rmadmin)"; exit 2 ;;
esac
# Quiet: the client logs at WARN only.
exec java -Xmx256m -Dhadoop.root.logger=WARN,console -Dlog4j.configuration="file:$RUN/etc/log4j-client.properties" \
  -cp "$RUN/etc:$LIB/*" "org.apache.hadoop.yarn.client.cli.$cls" "$@"
