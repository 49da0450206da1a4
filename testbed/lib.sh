# shellcheck shell=bash
# Shared settings for testbed/{up,down,apf}.sh. Every value can be overridden by env.
TESTBED_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN_DIR=${STRATCTL_TESTBED_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stratctl/testbed-run}

ETCD_PORT=${STRATCTL_TESTBED_ETCD_PORT:-22379}
ETCD_PEER_PORT=${STRATCTL_TESTBED_ETCD_PEER_PORT:-22380}
APISERVER_PORT=${STRATCTL_TESTBED_APISERVER_PORT:-26443}
KCM_PORT=${STRATCTL_TESTBED_KCM_PORT:-26257}
VC_CM_HEALTHZ_PORT=${STRATCTL_TESTBED_VC_CM_HEALTHZ_PORT:-26251}
VC_CM_METRICS_PORT=${STRATCTL_TESTBED_VC_CM_METRICS_PORT:-26281}
VC_SCHED_HEALTHZ_PORT=${STRATCTL_TESTBED_VC_SCHED_HEALTHZ_PORT:-26252}
VC_SCHED_METRICS_PORT=${STRATCTL_TESTBED_VC_SCHED_METRICS_PORT:-26280}
KWOK_PORT=${STRATCTL_TESTBED_KWOK_PORT:-26247}
PROMETHEUS_PORT=${STRATCTL_TESTBED_PROMETHEUS_PORT:-26290}

NODES=${STRATCTL_TESTBED_NODES:-8}
GPUS_PER_NODE=${STRATCTL_TESTBED_GPUS_PER_NODE:-8}

NAMESPACE=stratctl-e2e
RESTRICTED_USER=trial-runner
NO_NODES_USER=no-node-reader  # bound without the cluster-wide reads (context restricted-no-nodes)
KUBECONFIG_PATH=$RUN_DIR/kubeconfig
APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
PROMETHEUS_URL=http://127.0.0.1:$PROMETHEUS_PORT

# Start order; down stops them in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager vc-controller-manager vc-scheduler kwok prometheus)

tb_log() { echo "testbed: $*" >&2; }

# admin kubectl (binary from the build cache)
kc() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_PATH" --context admin "$@"; }

# Alive and not a zombie (orphaned components may be reparented to a pid 1 that never reaps).
pid_alive() {
  [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null || return 1
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
  [[ $state != Z ]]
}

component_pid() { cat "$RUN_DIR/pids/$1.pid" 2>/dev/null || true; }

# Locate the cached binaries, building them if needed (prints nothing on stdout).
resolve_bin_dir() {
  local out
  if [[ -n ${STRATCTL_TESTBED_BIN_DIR:-} ]]; then # prebuilt binaries (and ../crds)
    BIN_DIR=$STRATCTL_TESTBED_BIN_DIR; OUT_DIR=$(dirname "$BIN_DIR"); CRD_DIR=$OUT_DIR/crds
    return 0
  fi
  out=$(bash "$TESTBED_SRC/build.sh" | tail -n 1) || return 1
  OUT_DIR=$out
  BIN_DIR=$out/bin
  CRD_DIR=$out/crds
}

# Binaries of the running testbed (recorded by up.sh).
load_run_bin_dir() {
  BIN_DIR=$(cat "$RUN_DIR/bin-dir" 2>/dev/null || true)
  [[ -n $BIN_DIR && -x $BIN_DIR/kubectl ]] || { tb_log "testbed is not up (no $RUN_DIR/bin-dir)"; return 1; }
}
