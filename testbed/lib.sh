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
# The real node (realnode.sh): its kubelet listens on the bridge address, the rest on loopback.
KUBELET_PORT=${STRATCTL_TESTBED_KUBELET_PORT:-26250}
KUBELET_HEALTHZ_PORT=${STRATCTL_TESTBED_KUBELET_HEALTHZ_PORT:-26248}
CONTAINERD_STREAM_PORT=${STRATCTL_TESTBED_CONTAINERD_STREAM_PORT:-26246}
COREDNS_HEALTH_PORT=${STRATCTL_TESTBED_COREDNS_HEALTH_PORT:-26245}

NODES=${STRATCTL_TESTBED_NODES:-8}
GPUS_PER_NODE=${STRATCTL_TESTBED_GPUS_PER_NODE:-8}

# One node whose kubelet runs real pods (containerd, runc), beside KWOK's: on unless
# STRATCTL_TESTBED_REAL_NODE=0. One per machine (fixed paths, the bridge, DNS on port 53).
REAL_NODE=${STRATCTL_TESTBED_REAL_NODE:-1}
REAL_NODE_NAME=stratctl-real-0
REAL_NODE_GPUS=4  # fake nvidia.com/gpu in its capacity and allocatable
REAL_TAINT_KEY=testbed.stratctl.io/real  # label and NoSchedule taint (=true)
REAL_BRIDGE=stratctl0
REAL_SUBNET=10.211.0.0/24
REAL_NODE_IP=10.211.0.1  # the bridge's address: node IP, kubelet, cluster DNS
REAL_CGROUP_ROOT=/stratctl-testbed  # the kubelet's cgroupRoot, in every hierarchy

NAMESPACE=stratctl-e2e
RESTRICTED_USER=trial-runner
NO_NODES_USER=no-node-reader  # bound without the cluster-wide reads (context restricted-no-nodes)
KUBECONFIG_PATH=$RUN_DIR/kubeconfig
APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
PROMETHEUS_URL=http://127.0.0.1:$PROMETHEUS_PORT

# Start order; down stops them in reverse. The real node's three run only when
# $RUN_DIR/real-node says 1 (real_node_on).
COMPONENTS=(etcd kube-apiserver kube-controller-manager vc-controller-manager vc-scheduler kwok containerd coredns kubelet prometheus)
REAL_COMPONENTS=(containerd coredns kubelet)
real_node_on() { [[ $(cat "$RUN_DIR/real-node" 2>/dev/null) == 1 ]]; }
# The components this testbed runs.
running_components() {
  local c
  for c in "${COMPONENTS[@]}"; do
    if [[ " ${REAL_COMPONENTS[*]} " == *" $c "* ]] && ! real_node_on; then continue; fi
    echo "$c"
  done
}

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
