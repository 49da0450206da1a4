# shellcheck shell=bash
# The real node, sourced by up.sh (needs its start/wait_for/fail/kc, BIN_DIR, PKI and the
# tokens): a kubelet v1.35.4 with containerd 1.6 and runc (Debian's) running real pods,
# registered as $REAL_NODE_NAME beside KWOK's nodes, labelled and tainted
# $REAL_TAINT_KEY=true:NoSchedule (only pods that tolerate it go there), with fake
# nvidia.com/gpu in its capacity and allocatable; CoreDNS as a host process on the
# bridge address serves the cluster's names to its pods. Each setting's why: testbed/README.md,
# "The real node" (each was an error first, on this kind of machine).
#
#   bridge $REAL_BRIDGE ($REAL_NODE_IP)  the node IP (loopback is refused) and the pods' gateway
#   containerd   own root, state and socket under $RUN_DIR/containerd; images from images.sh
#   CoreDNS      $REAL_NODE_IP:53, kubernetes plugin (EndpointSlices), health on loopback
#   kubelet      $REAL_NODE_IP:$KUBELET_PORT, root dir $RUN_DIR/kubelet, cgroupfs under
#                $REAL_CGROUP_ROOT, x509 client CA = the testbed CA, Webhook authorization
#
# Every host change is recorded first (host.sh: host_record) and undone by down.sh.

# shellcheck source=host.sh
source "$TESTBED_SRC/host.sh"

# Why this machine cannot run the real node ("" when it can).
realnode_unsupported() {
  (( EUID == 0 )) || { echo "not root"; return; }
  local b
  for b in containerd containerd-shim-runc-v2 runc ctr iptables ip; do
    command -v "$b" >/dev/null || { echo "no $b (testbed/packages.sh installs it)"; return; }
  done
  [[ -x /usr/lib/cni/bridge ]] || { echo "no CNI plugins in /usr/lib/cni"; return; }
  [[ -x $BIN_DIR/kubelet && -x $BIN_DIR/coredns ]] || { echo "no kubelet or coredns in $BIN_DIR"; return; }
}

realnode_cgroups() {
  local h
  if [[ -e /sys/fs/cgroup/cgroup.controllers ]]; then # v2: one tree, controllers delegated
    mkdir -p "/sys/fs/cgroup$REAL_CGROUP_ROOT"
    for h in $(cat /sys/fs/cgroup/cgroup.subtree_control); do
      echo "+$h" > "/sys/fs/cgroup$REAL_CGROUP_ROOT/cgroup.subtree_control" 2>/dev/null || true
    done
    return
  fi
  for h in /sys/fs/cgroup/*/; do
    h=${h%/}
    [[ $h == */unified ]] && continue
    mountpoint -q "$h" || continue
    mkdir -p "$h$REAL_CGROUP_ROOT"
    if [[ -e $h/cpuset.cpus ]]; then # a new cpuset cgroup has no CPUs or memory nodes
      cat "$h/cpuset.cpus" > "$h$REAL_CGROUP_ROOT/cpuset.cpus"
      cat "$h/cpuset.mems" > "$h$REAL_CGROUP_ROOT/cpuset.mems"
    fi
  done
}

realnode_bridge() { # the node's address must exist before the kubelet and CoreDNS bind it
  ip link show dev "$REAL_BRIDGE" >/dev/null 2>&1 || ip link add "$REAL_BRIDGE" type bridge
  ip addr show dev "$REAL_BRIDGE" | grep -qF " $REAL_NODE_IP/" ||
    ip addr add "$REAL_NODE_IP/${REAL_SUBNET#*/}" dev "$REAL_BRIDGE"
  ip link set "$REAL_BRIDGE" up
}

realnode_containerd() {
  local c=$RUN_DIR/containerd
  rm -rf "$c" "$RUN_DIR/etc/cni"
  mkdir -p "$c" "$RUN_DIR/etc/cni"
  cat > "$RUN_DIR/etc/cni/10-stratctl.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "stratctl-testbed",
  "plugins": [
    {
      "type": "bridge", "bridge": "$REAL_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$RUN_DIR/cni/networks",
        "ranges": [[{"subnet": "$REAL_SUBNET", "gateway": "$REAL_NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
  # restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE (runc: "can't get final
  # child's PID from pipe" otherwise). SystemdCgroup = false: the kubelet's cgroupfs.
  cat > "$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$c/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  stream_server_address = "127.0.0.1"
  stream_server_port = "$CONTAINERD_STREAM_PORT"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$c/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RUN_DIR/etc/cni"
EOF
  start containerd containerd --config "$c/config.toml" --log-level warn
  wait_for containerd 30 ctr --address "$c/containerd.sock" version
}

realnode_images() {
  local archive
  for archive in "${REAL_IMAGES[@]}"; do
    ctr --address "$RUN_DIR/containerd/containerd.sock" -n k8s.io images import --no-unpack=false "$archive" >/dev/null ||
      { tb_log "cannot import $archive into containerd"; fail containerd; }
  done
  echo "${REAL_IMAGES[*]}" > "$RUN_DIR/images"
  tb_log "images imported: $(ctr --address "$RUN_DIR/containerd/containerd.sock" -n k8s.io images ls -q | grep -v '^sha256:' | tr '\n' ' ')($(elapsed))"
}

realnode_coredns() {
  mkdir -p "$RUN_DIR/coredns"
  cat > "$RUN_DIR/coredns/Corefile" <<EOF
.:53 {
    bind $REAL_NODE_IP
    errors
    health 127.0.0.1:$COREDNS_HEALTH_PORT
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $RUN_DIR/coredns.kubeconfig default
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 5
    loop
}
EOF
  start coredns "$BIN_DIR/coredns" -conf "$RUN_DIR/coredns/Corefile"
  wait_for coredns 30 curl_ok "http://127.0.0.1:$COREDNS_HEALTH_PORT/health"
}

realnode_kubelet() {
  local k=$RUN_DIR/kubelet
  mkdir -p "$k" "$RUN_DIR/pod-logs"
  cat > "$RUN_DIR/etc/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $REAL_NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$RUN_DIR/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: $REAL_CGROUP_ROOT
failCgroupV1: false
failSwapOn: false
clusterDNS: [$REAL_NODE_IP]
clusterDomain: cluster.local
podLogsDirectory: $RUN_DIR/pod-logs
registerWithTaints:
- {key: $REAL_TAINT_KEY, value: "true", effect: NoSchedule}
maxPods: 30
serializeImagePulls: false
# The images cannot be pulled again: never collect them; no eviction on a shared disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
nodeStatusUpdateFrequency: 10s
EOF
  start kubelet "$BIN_DIR/kubelet" --config "$RUN_DIR/etc/kubelet.yaml" \
    --kubeconfig "$RUN_DIR/kubelet.kubeconfig" --root-dir "$k" \
    --hostname-override "$REAL_NODE_NAME" --node-ip "$REAL_NODE_IP" \
    --node-labels "$REAL_TAINT_KEY=true,type=real" --v=1
  wait_for kubelet 60 curl_ok "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz"
  wait_for kubelet 60 realnode_ready
  # Fake GPUs: both fields, through the status subresource (the kubelet keeps them).
  kc patch node "$REAL_NODE_NAME" --subresource status --type merge \
    -p "{\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"$REAL_NODE_GPUS\"},\"allocatable\":{\"nvidia.com/gpu\":\"$REAL_NODE_GPUS\"}}}" >/dev/null
  tb_log "real node $REAL_NODE_NAME Ready ($REAL_NODE_IP, $REAL_NODE_GPUS fake nvidia.com/gpu, taint $REAL_TAINT_KEY=true:NoSchedule) ($(elapsed))"
}

realnode_ready() {
  [[ $(kc get node "$REAL_NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# healthy() of up.sh: the node's processes, Ready, its GPUs.
realnode_healthy() {
  curl -sf --max-time 2 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" >/dev/null || return 1
  curl -sf --max-time 2 "http://127.0.0.1:$COREDNS_HEALTH_PORT/health" >/dev/null || return 1
  realnode_ready || return 1
  [[ $(kc get node "$REAL_NODE_NAME" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}' 2>/dev/null) == "$REAL_NODE_GPUS" ]]
}

# Pods reach the API server as in a cluster: the `kubernetes` Service's address (what the
# kubelet gives every pod as KUBERNETES_SERVICE_HOST/PORT) leads to the API server on
# loopback, through a DNAT of the bridge's traffic (chain STRATCTL-API) and route_localnet
# on the bridge alone (a packet to 127.0.0.1 that comes from a pod is not a martian there).
# No kube-proxy: this one Service is what a pod needs (a submit loop run in the cluster).
# The serving certificate names 10.96.0.1 and kubernetes.default.svc. Undone by down.sh:
# the chain and the jump (host.sh), the sysctl with the bridge.
realnode_api_route() {
  local ip
  ip=$(kc get service kubernetes -n default -o jsonpath='{.spec.clusterIP}')
  [[ -n $ip ]] || { tb_log "no clusterIP for the kubernetes Service"; fail kube-apiserver; }
  sysctl -qw "net.ipv4.conf.$REAL_BRIDGE.route_localnet=1"
  iptables -t nat -N STRATCTL-API 2>/dev/null || iptables -t nat -F STRATCTL-API
  iptables -t nat -A STRATCTL-API -d "$ip/32" -p tcp --dport 443 -j DNAT --to-destination "127.0.0.1:$APISERVER_PORT"
  iptables -t nat -C PREROUTING -i "$REAL_BRIDGE" -j STRATCTL-API 2>/dev/null ||
    iptables -t nat -A PREROUTING -i "$REAL_BRIDGE" -j STRATCTL-API
}

realnode_up() {
  host_record
  realnode_cgroups
  realnode_bridge
  realnode_api_route
  realnode_containerd
  realnode_images
  realnode_coredns
  realnode_kubelet
}
