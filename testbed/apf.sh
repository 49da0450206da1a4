#!/usr/bin/env bash
# testbed/apf.sh on|off|status
#   on:  route every request of user trial-runner to the one-seat Reject priority level
#        (FlowSchema stratctl-trial-runner), so concurrent requests get HTTP 429 + Retry-After.
#   off: delete that FlowSchema (trial-runner falls back to the built-in global-default level).
# Waits until the API server has picked up the change (X-Kubernetes-PF-FlowSchema-UID header).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_run_bin_dir

mode=${1:-status}
token=$(awk -F, -v u="$RESTRICTED_USER" '$2 == u {print $1}' "$RUN_DIR/pki/tokens.csv")
fs_header() {
  curl -s --max-time 5 --cacert "$RUN_DIR/pki/ca.crt" -H "Authorization: Bearer $token" -o /dev/null -D - \
    "$APISERVER_URL/api/v1/namespaces/$NAMESPACE/configmaps?limit=1" |
    awk 'tolower($1) == "x-kubernetes-pf-flowschema-uid:" {print $2}' | tr -d '\r'
}
fs_uid() { kc get flowschema stratctl-trial-runner -o jsonpath='{.metadata.uid}' 2>/dev/null || true; }

case $mode in
  on)
    kc apply -f "$TESTBED_SRC/apf-flowschema.yaml" >/dev/null
    uid=$(fs_uid)
    for _ in $(seq 100); do [[ $(fs_header) == "$uid" ]] && break; sleep 0.1; done
    [[ $(fs_header) == "$uid" ]] || { tb_log "APF limit not effective yet"; exit 1; }
    tb_log "APF limit for $RESTRICTED_USER: on"
    ;;
  off)
    uid=$(fs_uid)
    kc delete flowschema stratctl-trial-runner --ignore-not-found >/dev/null
    if [[ -n $uid ]]; then
      for _ in $(seq 100); do [[ $(fs_header) != "$uid" ]] && break; sleep 0.1; done
    fi
    tb_log "APF limit for $RESTRICTED_USER: off"
    ;;
  status)
    if [[ -n $(fs_uid) ]]; then echo on; else echo off; fi
    ;;
  *) echo "usage: $0 on|off|status" >&2; exit 2 ;;
esac
