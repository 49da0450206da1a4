#!/usr/bin/env bash
# Start the local testbed: etcd -> kube-apiserver -> CRDs/RBAC/APF/queues ->
# kube-controller-manager -> vc-controller-manager -> vc-scheduler -> kwok -> fake GPU nodes
# -> Prometheus scraping them all. Builds the binaries first when the cache is empty
# (testbed/build.sh) and installs the Debian packages it uses (testbed/packages.sh).
# The last line of output is the kubeconfig path. See testbed/README.md.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

T0=${EPOCHREALTIME/./}
elapsed() { local d=$(( (${EPOCHREALTIME/./} - T0) / 100000 )); printf '%d.%ds' $(( d / 10 )) $(( d % 10 )); }

bash "$TESTBED_SRC/packages.sh" >&2
# shellcheck source=realnode.sh
source "$TESTBED_SRC/realnode.sh"

mkdir -p "$RUN_DIR"
exec 8>"$RUN_DIR/.lock"
flock 8

# ---------------------------------------------------------------- already up?
healthy() {
  local c
  for c in $(running_components); do pid_alive "$(component_pid "$c")" || return 1; done
  [[ -s $KUBECONFIG_PATH ]] || return 1
  [[ $(cat "$RUN_DIR/bin-dir" 2>/dev/null) == "$BIN_DIR" ]] || return 1
  kc get --raw /readyz >/dev/null 2>&1 || return 1
  curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" >/dev/null || return 1
  curl -sfk --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz" >/dev/null || return 1
  curl -sf --max-time 2 "http://127.0.0.1:$VC_CM_HEALTHZ_PORT/healthz" >/dev/null || return 1
  curl -sf --max-time 2 "http://127.0.0.1:$VC_SCHED_HEALTHZ_PORT/healthz" >/dev/null || return 1
  curl -sf --max-time 2 "http://127.0.0.1:$KWOK_PORT/healthz" >/dev/null || return 1
  curl -sf --max-time 2 "$PROMETHEUS_URL/-/ready" >/dev/null || return 1
  curl -sf --max-time 2 "http://127.0.0.1:$VC_SCHED_METRICS_PORT/metrics" >/dev/null || return 1
  # The network topology (a testbed started before it existed has none).
  [[ $(kc get hypernodes -o name 2>/dev/null | wc -l) -eq $(grep -c '^kind: HyperNode' "$TESTBED_SRC/hypernodes.yaml") ]] || return 1
  # Everything we create last must be there.
  [[ $(kc get nodes -l type=kwok -o name 2>/dev/null | wc -l) -eq $(cat "$RUN_DIR/node-count" 2>/dev/null || echo -1) ]] || return 1
  ! real_node_on || realnode_healthy
}
# STRATCTL_TESTBED_FRESH=1: always start from scratch (CI), even when already up.
# A healthy testbed is reused as it runs, with the binaries it was started with (even when
# the pins or build.sh changed since) and with or without its real node: only a fresh
# start builds and picks up what changed, so that a change in the tree never restarts a
# testbed that other sessions are using.
if [[ ${STRATCTL_TESTBED_FRESH:-0} != 1 ]]; then
  BIN_DIR=${STRATCTL_TESTBED_BIN_DIR:-$(cat "$RUN_DIR/bin-dir" 2>/dev/null || true)}
  if [[ -n $BIN_DIR ]] && healthy; then
    # the restricted users' RBAC as the tree has it now (it grows with what stratctl creates)
    kc apply --server-side -f "$TESTBED_SRC/rbac.yaml" -f "$TESTBED_SRC/rbac-no-nodes.yaml" >/dev/null
    real_node_on && real="with its real node $REAL_NODE_NAME" || real="without a real node"
    # the real node's images as this checkout makes them: a changed stratctl is what its
    # pods run next (images.sh is cached by its inputs; only a new archive is imported)
    if real_node_on; then
      mapfile -t REAL_IMAGES < <(bash "$TESTBED_SRC/images.sh") && (( ${#REAL_IMAGES[@]} == 4 )) ||
        { tb_log "cannot build the real node's images (testbed/images.sh)"; exit 1; }
      [[ $(cat "$RUN_DIR/images" 2>/dev/null) == "${REAL_IMAGES[*]}" ]] || realnode_images
    fi
    tb_log "already up, $real (state in $RUN_DIR); Prometheus: $PROMETHEUS_URL"
    echo "$KUBECONFIG_PATH"
    exit 0
  fi
fi
resolve_bin_dir
if compgen -G "$RUN_DIR/pids/*.pid" >/dev/null || [[ -d $RUN_DIR/host ]]; then
  tb_log "stale testbed state in $RUN_DIR (or STRATCTL_TESTBED_FRESH=1): stopping it first"
  bash "$TESTBED_SRC/down.sh" >&2
fi
if [[ -n $(host_mounts_under "$RUN_DIR") ]]; then
  tb_log "mounts left under $RUN_DIR (down.sh could not undo them): $(host_mounts_under "$RUN_DIR" | tr '\n' ' ')"
  exit 1
fi

# ---------------------------------------------------------------- fresh state
rm -rf "$RUN_DIR/etcd" "$RUN_DIR/prometheus" "$RUN_DIR/prometheus-url" "$RUN_DIR/pki" "$RUN_DIR/logs" "$RUN_DIR/pids" "$RUN_DIR/kwok-home" "$RUN_DIR"/*.kubeconfig \
  "$RUN_DIR/real-node" "$RUN_DIR/containerd" "$RUN_DIR/kubelet" "$RUN_DIR/pod-logs" "$RUN_DIR/cni" "$RUN_DIR/coredns"
mkdir -p "$RUN_DIR"/{pki,logs,pids,kwok-home,etc}
echo "$BIN_DIR" > "$RUN_DIR/bin-dir"

# ---------------------------------------------------------------- the real node?
REAL=0
if [[ $REAL_NODE != 0 ]]; then
  why=$(realnode_unsupported)
  if [[ -n $why ]]; then
    tb_log "no real node: $why (STRATCTL_TESTBED_REAL_NODE=0 says so quietly)"
  elif ! owner=$(host_claim); then
    tb_log "no real node: the testbed in $owner runs this machine's one (only one per machine)"
  else
    REAL=1
    mapfile -t REAL_IMAGES < <(bash "$TESTBED_SRC/images.sh") && (( ${#REAL_IMAGES[@]} == 4 )) ||
      { tb_log "the real node's images could not be built (testbed/images.sh; STRATCTL_TESTBED_REAL_NODE=0 starts without it)"; rm -f "$HOST_CLAIM"; exit 1; }
  fi
fi
echo "$REAL" > "$RUN_DIR/real-node"

port_free() { ! (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ports=("$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT" "$VC_CM_HEALTHZ_PORT" \
       "$VC_CM_METRICS_PORT" "$VC_SCHED_HEALTHZ_PORT" "$VC_SCHED_METRICS_PORT" "$KWOK_PORT" "$PROMETHEUS_PORT")
(( REAL )) && ports+=("$KUBELET_HEALTHZ_PORT" "$CONTAINERD_STREAM_PORT" "$COREDNS_HEALTH_PORT")
for p in "${ports[@]}"; do
  port_free "$p" || { tb_log "port 127.0.0.1:$p is in use (override with STRATCTL_TESTBED_*_PORT)"; exit 1; }
done

# ---------------------------------------------------------------- certificates and tokens
PKI=$RUN_DIR/pki
(
  cd "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=stratctl-testbed-ca" 2>/dev/null
  cat > server.ext <<EOF
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
keyUsage=digitalSignature,keyEncipherment
EOF
  openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=kube-apiserver" 2>/dev/null
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 3650 \
    -extfile server.ext 2>/dev/null
  # A client certificate for the admin (alternative to the token; user admin-cert in the kubeconfig).
  printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n' > client.ext
  openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=admin" 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 3650 \
    -extfile client.ext 2>/dev/null
  # The API server's client certificate towards kubelets (`kubectl logs`, exec): the real
  # node's kubelet trusts the testbed CA and asks the API server (Webhook) what it may do.
  openssl req -newkey rsa:2048 -nodes -keyout apiserver-kubelet-client.key -out apiserver-kubelet-client.csr \
    -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" 2>/dev/null
  openssl x509 -req -in apiserver-kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -out apiserver-kubelet-client.crt -days 3650 -extfile client.ext 2>/dev/null
  # The real node's kubelet serving certificate (its address is the bridge's).
  printf 'subjectAltName=IP:%s,DNS:%s\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n' \
    "$REAL_NODE_IP" "$REAL_NODE_NAME" > kubelet.ext
  openssl req -newkey rsa:2048 -nodes -keyout kubelet.key -out kubelet.csr -subj "/CN=$REAL_NODE_NAME" 2>/dev/null
  openssl x509 -req -in kubelet.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out kubelet.crt -days 3650 \
    -extfile kubelet.ext 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
)
tok() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
ADMIN_TOKEN=$(tok); RESTRICTED_TOKEN=$(tok); NO_NODES_TOKEN=$(tok); KCM_TOKEN=$(tok); VC_CM_TOKEN=$(tok); VC_SCHED_TOKEN=$(tok); KWOK_TOKEN=$(tok); KUBELET_TOKEN=$(tok); COREDNS_TOKEN=$(tok)
# token,user,uid,"groups". Control-plane components are system:masters, hence exempt from APF.
cat > "$PKI/tokens.csv" <<EOF
$ADMIN_TOKEN,admin,uid-admin,"system:masters"
$RESTRICTED_TOKEN,$RESTRICTED_USER,uid-$RESTRICTED_USER,"stratctl:trial-runners"
$NO_NODES_TOKEN,$NO_NODES_USER,uid-$NO_NODES_USER,"stratctl:trial-runners"
$KCM_TOKEN,system:kube-controller-manager,uid-kcm,"system:masters"
$VC_CM_TOKEN,volcano-controllers,uid-vc-cm,"system:masters"
$VC_SCHED_TOKEN,volcano-scheduler,uid-vc-sched,"system:masters"
$KWOK_TOKEN,kwok-controller,uid-kwok,"system:masters"
$KUBELET_TOKEN,system:node:$REAL_NODE_NAME,uid-kubelet,"system:masters,system:nodes"
$COREDNS_TOKEN,coredns,uid-coredns,"system:masters"
EOF
chmod 600 "$PKI"/*.key "$PKI/tokens.csv"

write_kubeconfig() { # file user token [context]
  local ctx=${4:-default}
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: stratctl-testbed
  cluster:
    server: $APISERVER_URL
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: $ctx
  context:
    cluster: stratctl-testbed
    user: $2
current-context: $ctx
EOF
  chmod 600 "$1"
}
write_kubeconfig "$RUN_DIR/kube-controller-manager.kubeconfig" system:kube-controller-manager "$KCM_TOKEN"
write_kubeconfig "$RUN_DIR/vc-controller-manager.kubeconfig" volcano-controllers "$VC_CM_TOKEN"
write_kubeconfig "$RUN_DIR/vc-scheduler.kubeconfig" volcano-scheduler "$VC_SCHED_TOKEN"
write_kubeconfig "$RUN_DIR/kwok.kubeconfig" kwok-controller "$KWOK_TOKEN"
write_kubeconfig "$RUN_DIR/kubelet.kubeconfig" "system:node:$REAL_NODE_NAME" "$KUBELET_TOKEN"
write_kubeconfig "$RUN_DIR/coredns.kubeconfig" coredns "$COREDNS_TOKEN"
cat > "$KUBECONFIG_PATH.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: stratctl-testbed
  cluster:
    server: $APISERVER_URL
    certificate-authority: $PKI/ca.crt
users:
- name: admin
  user:
    token: $ADMIN_TOKEN
- name: admin-cert
  user:
    client-certificate: $PKI/admin.crt
    client-key: $PKI/admin.key
- name: $RESTRICTED_USER
  user:
    token: $RESTRICTED_TOKEN
- name: $NO_NODES_USER
  user:
    token: $NO_NODES_TOKEN
contexts:
- name: admin
  context:
    cluster: stratctl-testbed
    user: admin
- name: restricted
  context:
    cluster: stratctl-testbed
    user: $RESTRICTED_USER
    namespace: $NAMESPACE
- name: restricted-no-nodes
  context:
    cluster: stratctl-testbed
    user: $NO_NODES_USER
    namespace: $NAMESPACE
current-context: admin
EOF
chmod 600 "$KUBECONFIG_PATH.tmp"
mv "$KUBECONFIG_PATH.tmp" "$KUBECONFIG_PATH"

# ---------------------------------------------------------------- process helpers
start() { # name args...  (own session => own process group; down kills the group)
  local name=$1; shift
  # The components must not inherit (and hold for as long as they run) any descriptor of
  # their caller: this script's lock on fd 8, or the lock of a `flock FILE make test` that
  # serialises test runs on a shared testbed. The subshell closes every fd above 2.
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      if (( fd > 2 )); then eval "exec $fd>&-"; fi
    done
    exec setsid "$@" >"$RUN_DIR/logs/$name.log" 2>&1 </dev/null
  ) &
  echo $! > "$RUN_DIR/pids/$name.pid"
}
fail() {
  tb_log "$1 did not become healthy; last lines of $RUN_DIR/logs/$1.log:"
  tail -n 30 "$RUN_DIR/logs/$1.log" >&2 || true
  bash "$TESTBED_SRC/down.sh" >&2 || true
  exit 1
}
wait_for() { # name timeout-seconds command...
  local name=$1 timeout=$2; shift 2
  local deadline=$(( $(date +%s) + timeout ))
  until "$@" >/dev/null 2>&1; do
    pid_alive "$(component_pid "$name")" || fail "$name"
    (( $(date +%s) < deadline )) || fail "$name"
    sleep 0.2
  done
  tb_log "$name ready ($(elapsed))"
}
curl_ok() { curl -sf --max-time 2 "$@"; }

# ---------------------------------------------------------------- etcd
start etcd "$BIN_DIR/etcd" --name testbed --data-dir "$RUN_DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "testbed=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
wait_for etcd 20 curl_ok "http://127.0.0.1:$ETCD_PORT/health"

# ---------------------------------------------------------------- kube-apiserver
# In-flight limits: APF splits max-requests-inflight + max-mutating-requests-inflight
# between priority levels by nominalConcurrencyShares (see testbed/README.md, APF).
start kube-apiserver "$BIN_DIR/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
  --tls-cert-file "$PKI/server.crt" --tls-private-key-file "$PKI/server.key" \
  --client-ca-file "$PKI/ca.crt" --token-auth-file "$PKI/tokens.csv" \
  --authorization-mode RBAC \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --api-audiences https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range 10.96.0.0/16 --endpoint-reconciler-type none \
  --disable-admission-plugins ServiceAccount,TaintNodesByCondition \
  --kubelet-preferred-address-types InternalIP \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --allow-privileged=true \
  --max-requests-inflight 150 --max-mutating-requests-inflight 50 \
  --enable-priority-and-fairness=true \
  --audit-policy-file "$TESTBED_SRC/audit-policy.yaml" --audit-log-path "$RUN_DIR/logs/audit.log" \
  --audit-log-format json --audit-log-maxsize 200 --audit-log-maxbackup 1 \
  --profiling=false --v=1
wait_for kube-apiserver 60 curl_ok --cacert "$PKI/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" "$APISERVER_URL/readyz"

# ---------------------------------------------------------------- CRDs and objects
kc apply --server-side -f "$CRD_DIR" >/dev/null
# Not `kubectl wait --for condition=Established`: right after the apply a CRD may have no
# .status.conditions yet, and kubectl wait then fails ("<nil> is of the type <nil>") instead
# of waiting. Count the CRDs whose Established condition is True, a missing status as not yet.
crds_established() {
  local want have
  want=$(kc get crd -o name | wc -l)
  have=$(kc get crd -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Established")].status}{"\n"}{end}' |
    grep -c '^True$')
  (( want > 0 && have >= want ))
}
wait_for kube-apiserver 30 crds_established
tb_log "Volcano CRDs established ($(elapsed))"
kc apply --server-side -f "$TESTBED_SRC/objects.yaml" >/dev/null
# The restricted users are bound to exactly what `stratctl rbac` prints (a unit test keeps
# these files equal to its output): trial-runner with the cluster-wide reads, no-node-reader without;
# rbac.yaml also holds the driver's ServiceAccount, Role, bindings and PriorityClass (--driver).
kc apply --server-side -f "$TESTBED_SRC/rbac.yaml" -f "$TESTBED_SRC/rbac-no-nodes.yaml" >/dev/null
tb_log "namespace, RBAC, priority classes, APF objects applied ($(elapsed))"
# The network topology, before the scheduler starts (it builds its HyperNode tree from them).
kc apply --server-side -f "$TESTBED_SRC/hypernodes.yaml" >/dev/null

# ---------------------------------------------------------------- kube-controller-manager
controllers=garbage-collector-controller,namespace-controller,job-controller,ttl-after-finished-controller,pod-garbage-collector-controller
# the binder binds a claim to a PersistentVolume, as on any cluster (the real node's trials
# keep checkpoints on a hostPath volume an admin made); CoreDNS reads EndpointSlices
controllers+=,persistentvolume-binder-controller
# the real node's pods: CoreDNS reads EndpointSlices; every namespace gets the cluster's CA
# (ConfigMap kube-root-ca.crt), which a pod's service account token volume projects
(( REAL )) && controllers+=,endpointslice-controller,root-ca-certificate-publisher-controller
start kube-controller-manager "$BIN_DIR/kube-controller-manager" \
  --kubeconfig "$RUN_DIR/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig "$RUN_DIR/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig "$RUN_DIR/kube-controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
  --controllers "$controllers" \
  --root-ca-file "$PKI/ca.crt" \
  --leader-elect=false --use-service-account-credentials=false \
  --concurrent-gc-syncs 5 --profiling=false --v=1
wait_for kube-controller-manager 30 curl_ok -k "https://127.0.0.1:$KCM_PORT/healthz"

# ---------------------------------------------------------------- Volcano
start vc-controller-manager "$BIN_DIR/vc-controller-manager" \
  --kubeconfig "$RUN_DIR/vc-controller-manager.kubeconfig" \
  --leader-elect=false \
  --controllers job-controller,pg-controller,queue-controller,gc-controller \
  --enable-healthz=true --healthz-address "127.0.0.1:$VC_CM_HEALTHZ_PORT" \
  --listen-address "127.0.0.1:$VC_CM_METRICS_PORT" --enable-metrics \
  --kube-api-qps 200 --kube-api-burst 400 --worker-threads 8 \
  --logtostderr -v 2
wait_for vc-controller-manager 30 curl_ok "http://127.0.0.1:$VC_CM_HEALTHZ_PORT/healthz"

start vc-scheduler "$BIN_DIR/vc-scheduler" \
  --kubeconfig "$RUN_DIR/vc-scheduler.kubeconfig" \
  --scheduler-conf "$TESTBED_SRC/volcano-scheduler.conf" \
  --leader-elect=false --schedule-period 500ms \
  --enable-healthz=true --healthz-address "127.0.0.1:$VC_SCHED_HEALTHZ_PORT" \
  --listen-address "127.0.0.1:$VC_SCHED_METRICS_PORT" --enable-metrics \
  --cache-dumper=false --logtostderr -v 2
wait_for vc-scheduler 30 curl_ok "http://127.0.0.1:$VC_SCHED_HEALTHZ_PORT/healthz"

# Queues once Volcano runs (its controllers may create "default" themselves).
kc apply --server-side --force-conflicts -f "$TESTBED_SRC/queues.yaml" >/dev/null

# ---------------------------------------------------------------- kwok and nodes
# Container logs: the fake nodes' kubelet endpoint is kwok's server (127.0.0.1:KWOK_PORT,
# HTTPS with its own certificate, which the API server does not verify without
# --kubelet-certificate-authority); every container of the namespace logs the same
# CRI-format file, so pods/log (`kubectl logs`, `stratctl logs`) answers something known.
cat > "$RUN_DIR/etc/trial.log" <<'EOF'
2026-01-01T00:00:00.000000000Z stdout F testbed trial: started
2026-01-01T00:00:01.000000000Z stdout F testbed trial: epoch 1 loss 0.90
2026-01-01T00:00:02.000000000Z stderr F testbed trial: fake GPU, nothing computed
2026-01-01T00:00:03.000000000Z stdout F testbed trial: epoch 2 loss 0.50
EOF
cat > "$RUN_DIR/etc/kwok-logs.yaml" <<EOF
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: testbed-trial-logs
spec:
  selector:
    matchNamespaces: [$NAMESPACE]
  logs:
  - logsFile: $RUN_DIR/etc/trial.log
EOF
start kwok env HOME="$RUN_DIR/kwok-home" "$BIN_DIR/kwok" \
  --kubeconfig "$RUN_DIR/kwok.kubeconfig" \
  --config "$TESTBED_SRC/kwok-stages.yaml" --config "$RUN_DIR/etc/kwok-logs.yaml" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --server-address "127.0.0.1:$KWOK_PORT" --node-port "$KWOK_PORT" \
  --cidr 10.244.0.1/16 --node-ip 127.0.0.1
wait_for kwok 30 curl_ok "http://127.0.0.1:$KWOK_PORT/healthz"

nodes_yaml() {
  local i zone
  for (( i = 0; i < NODES; i++ )); do
    if (( i < (NODES + 1) / 2 )); then zone=zone-a; else zone=zone-b; fi
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/hostname: gpu-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: fake-gpu-$GPUS_PER_NODE
    topology.kubernetes.io/zone: $zone
    topology.kubernetes.io/region: testbed
spec: {}
status:
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "$GPUS_PER_NODE"}
  capacity: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "$GPUS_PER_NODE"}
EOF
  done
}
nodes_yaml | kc apply -f - >/dev/null
echo "$NODES" > "$RUN_DIR/node-count"
deadline=$(( $(date +%s) + 30 ))
until [[ $(kc get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True) -ge $NODES ]]; do
  (( $(date +%s) < deadline )) || fail kwok
  sleep 0.2
done
tb_log "$NODES fake nodes x $GPUS_PER_NODE nvidia.com/gpu Ready ($(elapsed))"

(( REAL )) && realnode_up

bash "$TESTBED_SRC/apf.sh" "${STRATCTL_TESTBED_APF:-off}" >&2

# ---------------------------------------------------------------- Prometheus
# Scrapes every component, and any stratctl a test starts with --metrics-port: a JSON
# target list written to $RUN_DIR/prometheus/targets/ is picked up within seconds.
mkdir -p "$RUN_DIR/prometheus/targets" "$RUN_DIR/prometheus/data"
printf '%s' "$ADMIN_TOKEN" > "$RUN_DIR/prometheus/token"
chmod 600 "$RUN_DIR/prometheus/token"
cat > "$RUN_DIR/prometheus/prometheus.yml" <<EOF
global:
  scrape_interval: 2s
  scrape_timeout: 2s
  evaluation_interval: 2s
scrape_configs:
- job_name: kube-apiserver
  scheme: https
  scrape_interval: 5s  # ~2 MB of series per scrape
  scrape_timeout: 5s
  tls_config: {ca_file: $PKI/ca.crt}
  authorization: {credentials_file: $RUN_DIR/prometheus/token}
  static_configs: [{targets: ["127.0.0.1:$APISERVER_PORT"]}]
- job_name: etcd
  static_configs: [{targets: ["127.0.0.1:$ETCD_PORT"]}]
- job_name: kube-controller-manager
  scheme: https
  tls_config: {insecure_skip_verify: true}  # its self-signed serving certificate
  authorization: {credentials_file: $RUN_DIR/prometheus/token}
  static_configs: [{targets: ["127.0.0.1:$KCM_PORT"]}]
- job_name: volcano-scheduler
  static_configs: [{targets: ["127.0.0.1:$VC_SCHED_METRICS_PORT"]}]
- job_name: volcano-controllers
  static_configs: [{targets: ["127.0.0.1:$VC_CM_METRICS_PORT"]}]
- job_name: stratctl
  file_sd_configs: [{files: ["$RUN_DIR/prometheus/targets/*.json"], refresh_interval: 2s}]
EOF
start prometheus prometheus --config.file "$RUN_DIR/prometheus/prometheus.yml" \
  --storage.tsdb.path "$RUN_DIR/prometheus/data" --storage.tsdb.retention.time 6h \
  --web.listen-address "127.0.0.1:$PROMETHEUS_PORT" --web.enable-lifecycle \
  --log.level warn
wait_for prometheus 30 curl_ok "$PROMETHEUS_URL/-/ready"
echo "$PROMETHEUS_URL" > "$RUN_DIR/prometheus-url"
tb_log "Prometheus: $PROMETHEUS_URL (stratctl targets: $RUN_DIR/prometheus/targets/*.json)"

tb_log "up in $(elapsed); logs in $RUN_DIR/logs; contexts: admin (default), restricted (namespace $NAMESPACE)"
echo "$KUBECONFIG_PATH"
