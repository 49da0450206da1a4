#!/usr/bin/env bash
# Build the local testbed binaries from the pinned Go modules in testbed/modules/*.
#
#   etcd, kube-apiserver, kube-controller-manager, kubectl,
#   vc-scheduler, vc-controller-manager, kwok,
#   kubelet, coredns (the real node; not with STRATCTL_TESTBED_REAL_NODE=0)
#
# They go to a cache OUTSIDE the work tree, keyed by a hash of the pinned go.mod/go.sum
# files and this script:
#   ${STRATCTL_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stratctl/testbed}/<key>/bin
# plus the Volcano CRDs (<key>/crds) read from the pinned volcano.sh/volcano module.
# A second run with everything present only prints the cached path.
# Progress goes to stderr; stdout is only the cache directory (<key>).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_ROOT=${STRATCTL_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stratctl/testbed}

# Everything that determines the binaries goes into the key.
testbed_key() {
  (cd "$HERE" && cat build.sh modules/*/go.mod modules/*/go.sum modules/*/*.go) | sha256sum | cut -c1-16
}
KEY=$(testbed_key)
OUT=$CACHE_ROOT/$KEY
BINS=(etcd kube-apiserver kube-controller-manager kubectl vc-scheduler vc-controller-manager kwok)
[[ ${STRATCTL_TESTBED_REAL_NODE:-1} == 0 ]] || BINS+=(kubelet coredns)

complete() {
  local b
  for b in "${BINS[@]}"; do [[ -x $OUT/bin/$b ]] || return 1; done
  [[ -s $OUT/crds/batch.volcano.sh_jobs.yaml ]] || return 1
}

if complete; then
  echo "testbed: cached binaries at $OUT/bin" >&2
  echo "$OUT"
  exit 0
fi

command -v go >/dev/null || { echo "testbed: Go toolchain (>= 1.26) is required to build the testbed" >&2; exit 1; }
mkdir -p "$OUT"
# One build at a time per key (pytest workers, make targets).
exec 9>"$OUT/.lock"
flock 9
if complete; then
  echo "testbed: cached binaries at $OUT/bin" >&2
  echo "$OUT"
  exit 0
fi

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=${GOTOOLCHAIN:-local}
PAR=${STRATCTL_TESTBED_BUILD_JOBS:-$(nproc)}
TMP=$OUT/bin.partial
mkdir -p "$TMP"
# Binaries already built for this key (e.g. without the real node's) are kept.
[[ -d $OUT/bin ]] && cp -al "$OUT/bin/." "$TMP/" 2>/dev/null
start=$(date +%s)
log() { echo "testbed: [$(( $(date +%s) - start ))s] $*" >&2; }

K8S_VERSION=v1.35.4
BUILD_DATE=2026-01-01T00:00:00Z
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=35"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$BUILD_DATE"
done

gobuild() { # dir ldflags out pkg
  local dir=$1 ldflags=$2 out=$3 pkg=$4
  log "building $out ($pkg)"
  (cd "$HERE/modules/$dir" && go build >&2 -p "$PAR" -trimpath -ldflags "$ldflags" -o "$TMP/$out" "$pkg")
}

[[ -x $TMP/etcd ]] || gobuild etcd "-s -w" etcd go.etcd.io/etcd/server/v3
[[ -x $TMP/kube-apiserver ]] || gobuild k8s "$k8s_ldflags" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
[[ -x $TMP/kube-controller-manager ]] || gobuild k8s "$k8s_ldflags" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
[[ -x $TMP/kubectl ]] || gobuild k8s "$k8s_ldflags" kubectl k8s.io/kubernetes/cmd/kubectl
[[ -x $TMP/vc-scheduler ]] || gobuild volcano "-s -w" vc-scheduler volcano.sh/volcano/cmd/scheduler
[[ -x $TMP/vc-controller-manager ]] || gobuild volcano "-s -w" vc-controller-manager volcano.sh/volcano/cmd/controller-manager
[[ -x $TMP/kwok ]] || gobuild kwok "-s -w" kwok sigs.k8s.io/kwok/cmd/kwok
if [[ " ${BINS[*]} " == *" kubelet "* ]]; then
  [[ -x $TMP/kubelet ]] || gobuild k8s "$k8s_ldflags" kubelet k8s.io/kubernetes/cmd/kubelet
  [[ -x $TMP/coredns ]] || gobuild coredns "-s -w" coredns github.com/coredns/coredns
fi

# Volcano CRDs straight from the pinned module.
vdir=$(cd "$HERE/modules/volcano" && go list -m -f '{{.Dir}}' volcano.sh/volcano)
rm -rf "$OUT/crds.partial" && mkdir -p "$OUT/crds.partial"
cp "$vdir"/installer/helm/chart/volcano/crd/bases/*.yaml "$OUT/crds.partial/"
chmod -R u+w "$OUT/crds.partial"
rm -rf "$OUT/crds" && mv "$OUT/crds.partial" "$OUT/crds"

rm -rf "$OUT/bin" && mv "$TMP" "$OUT/bin"
secs=$(( $(date +%s) - start ))
echo "$secs" > "$OUT/build-seconds"
log "done in ${secs}s; $(du -sh "$OUT" | cut -f1) in $OUT"
echo "testbed: binaries at $OUT/bin" >&2
echo "$OUT"
