# shellcheck shell=bash
# What the real node changes on the host, written down before anything changes
# (host_record, from up.sh) and undone by down.sh (host_undo), so that a machine looks the
# same after `down.sh` as before `up.sh`:
#
#   processes   of its pods: every process in its cgroups gets SIGKILL (its daemons are
#               components with pid files, stopped before this)
#   mounts      under the state dir (kubelet root, containerd root/state) and HOST_MOUNT_DIRS
#               (of these, only under the entries made since up when up found one), deepest first
#   cgroups     $REAL_CGROUP_ROOT in every hierarchy (the kubelet's cgroupRoot)
#   iptables    the chains the kubelet (KUBE-FIREWALL, KUBE-KUBELET-CANARY,
#               KUBE-IPTABLES-HINT, ...), the CNI plugins (CNI-*) and up (STRATCTL-API:
#               the pods' way to the API server, realnode.sh) made, in every table
#               of iptables and ip6tables, and the rules that jump to them: those that
#               did not exist at up
#   sysctls     those the kubelet sets (kernel.panic, kernel.panic_on_oops,
#               vm.overcommit_memory, kernel.keys.root_max*), kube-proxy would set
#               (route_localnet, conntrack) and the bridge plugin sets (ip_forward):
#               written back to their values at up
#   the bridge  $REAL_BRIDGE, when up created it
#   fixed paths that neither the kubelet nor containerd lets one move (HOST_PATHS): removed
#               when up found them missing (their topmost missing parent), else only the
#               entries made since
#   the claim   $HOST_CLAIM: which state dir runs this machine's one real node
#
# Every host path goes through $HOST_ROOT (STRATCTL_TESTBED_HOST_ROOT, empty on a real
# run) and every command through PATH, so that tests/unit/test_testbed_host.py runs the
# undo against a fake root. Needs lib.sh (RUN_DIR, REAL_*).

HOST_ROOT=${STRATCTL_TESTBED_HOST_ROOT:-}
HOST_JOURNAL=$RUN_DIR/host
HOST_CLAIM=/run/stratctl-testbed-real-node
HOST_SYSCTLS=(
  kernel/panic kernel/panic_on_oops vm/overcommit_memory kernel/keys/root_maxkeys kernel/keys/root_maxbytes
  net/ipv4/ip_forward net/ipv4/conf/all/route_localnet net/ipv4/conf/all/forwarding
  net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables
  net/netfilter/nf_conntrack_max net/netfilter/nf_conntrack_tcp_timeout_established
  net/netfilter/nf_conntrack_tcp_timeout_close_wait
)
HOST_PATHS=(/var/lib/kubelet/device-plugins /var/log/containers /var/lib/cni /run/containerd /run/netns)
HOST_MOUNT_DIRS=(/var/lib/kubelet/device-plugins /run/containerd /run/netns)  # of HOST_PATHS
HOST_CHAIN_PATTERN='^(KUBE-|CNI-|STRATCTL-)'
HOST_IPTABLES=(iptables ip6tables)
HOST_TABLES=(filter nat mangle raw)

host_log() { echo "testbed: host: $*" >&2; }

# Chains of one family and table, one a line ("" when the command is missing).
host_chains() { # family table
  command -v "$1-save" >/dev/null 2>&1 || return 0
  "$1-save" -t "$2" 2>/dev/null | sed -n 's/^:\([^ ]*\) .*/\1/p'
}

host_cgroup_dirs() { # the real node's cgroup in each hierarchy (v1), or the one (v2)
  local d
  for d in "$HOST_ROOT"/sys/fs/cgroup/*"$REAL_CGROUP_ROOT" "$HOST_ROOT"/sys/fs/cgroup/"$REAL_CGROUP_ROOT"; do
    [[ -d $d ]] && echo "$d"
  done | sort -u
}

# Write down the host as it is, once per start (the first values are the host's own).
host_record() {
  local j=$HOST_JOURNAL k v p q top fam t
  [[ -e $j/recorded ]] && return 0
  mkdir -p "$j"
  : > "$j/sysctls"
  for k in "${HOST_SYSCTLS[@]}"; do
    v=$(cat "$HOST_ROOT/proc/sys/$k" 2>/dev/null) && printf '%s\t%s\n' "$k" "$v" >> "$j/sysctls"
  done
  : > "$j/paths-created"; : > "$j/paths-existing"; : > "$j/paths-entries"
  for p in "${HOST_PATHS[@]}"; do
    q=$p; top=
    while [[ ! -e $HOST_ROOT$q ]]; do top=$q; q=$(dirname "$q"); done
    if [[ -n $top ]]; then
      echo "$top" >> "$j/paths-created"
    else
      echo "$p" >> "$j/paths-existing"
      ls -A "$HOST_ROOT$p" 2>/dev/null | sed "s|^|$p\t|" >> "$j/paths-entries"
    fi
  done
  for fam in "${HOST_IPTABLES[@]}"; do
    for t in "${HOST_TABLES[@]}"; do host_chains "$fam" "$t" > "$j/chains.$fam.$t"; done
  done
  if ip link show dev "$REAL_BRIDGE" >/dev/null 2>&1; then rm -f "$j/bridge-created"; else touch "$j/bridge-created"; fi
  touch "$j/recorded"
}

# This machine's one real node: take it unless another state dir's kubelet runs it.
# Prints the other state dir when taken.
host_claim() {
  local owner
  owner=$(cat "$HOST_ROOT$HOST_CLAIM" 2>/dev/null || true)
  if [[ -n $owner && $owner != "$RUN_DIR" ]] && pid_alive "$(cat "$owner/pids/kubelet.pid" 2>/dev/null)"; then
    echo "$owner"
    return 1
  fi
  mkdir -p "$(dirname "$HOST_ROOT$HOST_CLAIM")"
  echo "$RUN_DIR" > "$HOST_ROOT$HOST_CLAIM"
}

# Mount points (decoded) under the given directories, deepest first.
host_mounts_under() {
  local mountinfo=$HOST_ROOT/proc/self/mountinfo
  [[ -r $mountinfo ]] || return 0
  awk '{print $5}' "$mountinfo" | while read -r m; do
    m=$(printf '%b' "${m//\\/\\0}")  # \040 (space) and the like
    for d in "$@"; do
      [[ $m == "$d" || $m == "$d"/* ]] && { echo "$m"; break; }
    done
  done | sort -ru
}

# SIGKILL every process in the node's cgroups (runc's container processes outlive their
# shims and the kubelet); fails if some survive 3 s.
host_kill_pods() {
  local pids d p
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(for d in $(host_cgroup_dirs); do find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null; done | sort -u |
      while read -r p; do pid_alive "$p" && echo "$p"; done)
    [[ -z $pids ]] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    sleep 0.3
  done
  host_log "processes still in the node's cgroups: $pids"
  return 1
}

# Entries of a path that up found existing, made since (one a line).
host_new_entries() { # path
  local entry
  [[ -d $HOST_ROOT$1 ]] || return 0
  while read -r entry; do
    [[ -n $entry ]] || continue
    grep -qxF -- "$1"$'\t'"$entry" "$HOST_JOURNAL/paths-entries" || echo "$entry"
  done < <(ls -A "$HOST_ROOT$1")
}

host_undo() {
  local j=$HOST_JOURNAL failed=0 d m fam t chain line k v p entry
  [[ -d $j ]] || return 0

  host_kill_pods || failed=1

  # mounts
  local dirs=("$RUN_DIR")
  for d in "${HOST_MOUNT_DIRS[@]}"; do
    if grep -qxF -- "$d" "$j/paths-existing"; then
      while read -r entry; do [[ -n $entry ]] && dirs+=("$HOST_ROOT$d/$entry"); done < <(host_new_entries "$d")
    else
      dirs+=("$HOST_ROOT$d")
    fi
  done
  while read -r m; do
    [[ -n $m ]] || continue
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || { host_log "cannot unmount $m"; failed=1; }
  done < <(host_mounts_under "${dirs[@]}")

  # cgroups, leaves first
  for d in $(host_cgroup_dirs); do
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
    [[ -d $d ]] && { host_log "cannot remove cgroup $d"; failed=1; }
  done

  # iptables: rules that jump to a chain made since up, then the chains
  for fam in "${HOST_IPTABLES[@]}"; do
    command -v "$fam" >/dev/null 2>&1 || continue
    for t in "${HOST_TABLES[@]}"; do
      local new=()
      while read -r chain; do
        [[ -n $chain ]] || continue
        grep -qxF -- "$chain" "$j/chains.$fam.$t" 2>/dev/null || new+=("$chain")
      done < <(host_chains "$fam" "$t" | grep -E "$HOST_CHAIN_PATTERN")
      (( ${#new[@]} )) || continue
      local alt
      alt=$(IFS='|'; echo "${new[*]}")
      while read -r line; do
        [[ -n $line ]] || continue
        eval "$fam -w -t $t -D ${line#-A }" 2>/dev/null || { host_log "$fam -t $t: cannot delete $line"; failed=1; }
      done < <("$fam-save" -t "$t" 2>/dev/null | grep -E -- "^-A .* -j ($alt)( |\$)" | grep -vE -- "^-A ($alt) ")
      for chain in "${new[@]}"; do "$fam" -w -t "$t" -F "$chain" 2>/dev/null; done
      for chain in "${new[@]}"; do
        "$fam" -w -t "$t" -X "$chain" 2>/dev/null || { host_log "$fam -t $t: cannot delete chain $chain"; failed=1; }
      done
    done
  done

  # the bridge
  if [[ -e $j/bridge-created ]] && ip link show dev "$REAL_BRIDGE" >/dev/null 2>&1; then
    ip link del dev "$REAL_BRIDGE" 2>/dev/null || { host_log "cannot delete the bridge $REAL_BRIDGE"; failed=1; }
  fi

  # sysctls
  while IFS=$'\t' read -r k v; do
    [[ -n $k ]] || continue
    [[ $(cat "$HOST_ROOT/proc/sys/$k" 2>/dev/null) == "$v" ]] && continue
    printf '%s\n' "$v" > "$HOST_ROOT/proc/sys/$k" 2>/dev/null || { host_log "cannot restore ${k//\//.} = $v"; failed=1; }
  done < "$j/sysctls"

  # fixed paths
  while read -r p; do
    [[ $p == /?* ]] && rm -rf -- "$HOST_ROOT$p" 2>/dev/null
    [[ -n $p && -e $HOST_ROOT$p ]] && { host_log "cannot remove $p"; failed=1; }
  done < "$j/paths-created"
  while read -r p; do
    [[ -n $p ]] || continue
    while read -r entry; do
      [[ -n $entry ]] && rm -rf -- "$HOST_ROOT$p/$entry"
    done < <(host_new_entries "$p")
  done < "$j/paths-existing"

  # the claim
  [[ $(cat "$HOST_ROOT$HOST_CLAIM" 2>/dev/null) == "$RUN_DIR" ]] && rm -f "$HOST_ROOT$HOST_CLAIM"

  (( failed == 0 )) || return 1
  rm -rf "$j"
  host_log "undone (sysctls, iptables chains, mounts, cgroups, bridge, paths)"
}
