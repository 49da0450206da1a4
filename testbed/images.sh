#!/usr/bin/env bash
# The real node's images, made without a registry and cached by their inputs:
#
#   registry.k8s.io/pause:3.10      a static C program that waits for a signal (the sandbox)
#   docker.io/library/busybox:1.36  Debian's busybox-static (1.35) and its applet links
#   stratctl.local/python:3.11      Debian's Python 3.11 (mmdebstrap --variant=essential)
#                                   and stratctl unpacked from this checkout's wheel
#   stratctl.local/stratctl:<ver>   the same Python with stratctl installed whole, its
#                                   dependencies and the `search` extra from the package
#                                   index: what a submit loop runs in the cluster (the
#                                   Containerfile at the repository's root builds its like)
#
# Each is a docker-archive (manifest.json, config, layer tars) that
# `ctr -n k8s.io images import` loads. They go OUTSIDE the work tree:
#   ${STRATCTL_TESTBED_IMAGES:-${XDG_CACHE_HOME:-$HOME/.cache}/stratctl/images}/
#     base-<key>/   pause.tar, busybox.tar, python-rootfs.tar (key: this script)
#     python-<key>/ python.tar, driver.tar (key: this script and the files that make the wheel)
# Only the newest of each is kept (python.tar holds a copy of the 150 MB rootfs).
# stdout: the paths of the four archives, one a line; progress goes to stderr.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
ROOT=${STRATCTL_TESTBED_IMAGES:-${XDG_CACHE_HOME:-$HOME/.cache}/stratctl/images}
SUITE=bookworm
MIRROR=${STRATCTL_TESTBED_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PAUSE_TAG=registry.k8s.io/pause:3.10
BUSYBOX_TAG=docker.io/library/busybox:1.36
PYTHON_TAG=stratctl.local/python:3.11
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml" | head -1)
DRIVER_TAG=stratctl.local/stratctl:$VERSION
log() { echo "testbed: images: $*" >&2; }

mkdir -p "$ROOT"
exec 7>"$ROOT/.lock"
flock 7

BASE_KEY=$(sha256sum < "$HERE/images.sh" | cut -c1-16)
wheel_inputs() { # the files the wheel is made of
  (cd "$REPO" && find stratctl templates dashboards pyproject.toml setup.py -type f \
    ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum)
}
PY_KEY=$( { cat "$HERE/images.sh"; wheel_inputs; } | sha256sum | cut -c1-16)
BASE=$ROOT/base-$BASE_KEY
PY=$ROOT/python-$PY_KEY

# docker_archive OUT TAG CONFIG_JSON LAYER.tar... : a `docker save` archive of one image.
# CONFIG_JSON is the image's "config" object (Entrypoint, Cmd, Env, WorkingDir).
docker_archive() {
  local out=$1 tag=$2 config=$3; shift 3
  local dir layers=() diffs=() i=0 l sum cfgsum
  dir=$(mktemp -d "$out.partial.XXXX")
  for l in "$@"; do
    sum=$(sha256sum "$l" | cut -d' ' -f1)
    ln "$l" "$dir/layer$i.tar" 2>/dev/null || cp "$l" "$dir/layer$i.tar"
    layers+=("\"layer$i.tar\""); diffs+=("\"sha256:$sum\""); i=$((i + 1))
  done
  local IFS=,
  printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":%s,"rootfs":{"type":"layers","diff_ids":[%s]}}' \
    "$config" "${diffs[*]}" > "$dir/config.json"
  cfgsum=$(sha256sum "$dir/config.json" | cut -d' ' -f1)
  mv "$dir/config.json" "$dir/$cfgsum.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":[%s]}]' "$cfgsum" "$tag" "${layers[*]}" > "$dir/manifest.json"
  tar_dir "$dir" "$out.tmp"
  rm -rf "$dir"
  mv "$out.tmp" "$out"
}
# A reproducible tar of a directory's content.
tar_dir() { tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$1" -cf "$2" .; }

build_pause() {
  local work=$1
  mkdir -p "$work/pause-src" "$work/pause-root"
  # What registry.k8s.io/pause does: hold the sandbox's namespaces, reap orphans, exit on
  # SIGINT/SIGTERM.
  cat > "$work/pause-src/pause.c" <<'EOF'
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction q = {.sa_handler = quit}, r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &q, NULL);
  sigaction(SIGTERM, &q, NULL);
  sigaction(SIGCHLD, &r, NULL);
  for (;;) pause();
}
EOF
  gcc -static -Os -s -o "$work/pause-root/pause" "$work/pause-src/pause.c"
  tar_dir "$work/pause-root" "$work/pause-layer.tar"
  docker_archive "$BASE/pause.tar" "$PAUSE_TAG" '{"Entrypoint":["/pause"]}' "$work/pause-layer.tar"
}

build_busybox() {
  local work=$1 r=$1/busybox-root applet
  mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/root"
  chmod 1777 "$r/tmp"
  cp /bin/busybox "$r/bin/busybox"
  for applet in $("$r/bin/busybox" --list); do
    [[ $applet == busybox ]] || ln -sf busybox "$r/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' > "$r/etc/group"
  tar_dir "$r" "$work/busybox-layer.tar"
  docker_archive "$BASE/busybox.tar" "$BUSYBOX_TAG" \
    '{"Cmd":["sh"],"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}' "$work/busybox-layer.tar"
}

build_python_rootfs() {
  local work=$1
  # essential: the Essential: yes packages (coreutils, bash, dash, ...) without apt; python3
  # brings the whole standard library; libstdc++6 for wheels with C++ extensions (jaxlib,
  # as python:3.11-slim has it). No docs, man pages or locales: half the size.
  mmdebstrap --quiet --variant=essential --include=python3,ca-certificates,libstdc++6 \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
    "$SUITE" "$work/python-rootfs.tar" "deb $MIRROR $SUITE main" </dev/null >&2
  mv "$work/python-rootfs.tar" "$BASE/python-rootfs.tar"
}

if [[ ! -s $BASE/pause.tar || ! -s $BASE/busybox.tar || ! -s $BASE/python-rootfs.tar ]]; then
  start=$(date +%s)
  mkdir -p "$BASE"
  work=$(mktemp -d "$BASE/work.XXXX")
  [[ -s $BASE/pause.tar ]] || { log "building $PAUSE_TAG (gcc -static)"; build_pause "$work"; }
  [[ -s $BASE/busybox.tar ]] || { log "building $BUSYBOX_TAG (Debian's busybox-static)"; build_busybox "$work"; }
  [[ -s $BASE/python-rootfs.tar ]] || { log "building the Debian $SUITE Python rootfs (mmdebstrap)"; build_python_rootfs "$work"; }
  rm -rf "$work"
  log "base images in $(( $(date +%s) - start ))s: $BASE"
fi

if [[ ! -s $PY/python.tar ]]; then
  start=$(date +%s)
  mkdir -p "$PY"
  work=$(mktemp -d "$PY/work.XXXX")
  python=$REPO/.venv/bin/python
  [[ -x $python ]] || python=python3
  log "building the stratctl wheel of $REPO"
  "$python" -m pip wheel --quiet --no-deps -w "$work/wheel" "$REPO" >&2
  # Installed as pip installs a pure-Python wheel: unpacked into a directory on sys.path.
  mkdir -p "$work/layer/usr/lib/python3/dist-packages"
  "$python" -m zipfile -e "$work"/wheel/stratctl-*.whl "$work/layer/usr/lib/python3/dist-packages"
  tar_dir "$work/layer" "$work/stratctl-layer.tar"
  docker_archive "$PY/python.tar" "$PYTHON_TAG" \
    '{"Cmd":["python3"],"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","PYTHONUNBUFFERED=1"]}' \
    "$BASE/python-rootfs.tar" "$work/stratctl-layer.tar"
  rm -rf "$work"
  log "$PYTHON_TAG with this checkout's stratctl in $(( $(date +%s) - start ))s: $PY"
fi
if [[ ! -s $PY/driver.tar ]]; then
  start=$(date +%s)
  mkdir -p "$PY"
  work=$(mktemp -d "$PY/work.XXXX")
  python=$REPO/.venv/bin/python
  [[ -x $python ]] || python=python3
  "$python" -m pip wheel --quiet --no-deps -w "$work/wheel" "$REPO" >&2
  wheel=$(ls "$work"/wheel/stratctl-*.whl)
  # as pip installs it, with its dependencies (binary wheels for this CPython 3.11 and
  # glibc: Debian 12's Python takes them), into the image's site directory
  "$python" -m pip install --quiet --disable-pip-version-check --no-compile --no-warn-script-location \
    --target "$work/layer/usr/lib/python3/dist-packages" "$wheel[search]" >&2
  tar_dir "$work/layer" "$work/driver-layer.tar"
  docker_archive "$PY/driver.tar" "$DRIVER_TAG" \
    '{"Entrypoint":["python3","-m","stratctl"],"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","PYTHONUNBUFFERED=1"]}' \
    "$BASE/python-rootfs.tar" "$work/driver-layer.tar"
  rm -rf "$work"
  log "$DRIVER_TAG (stratctl with its dependencies) in $(( $(date +%s) - start ))s: $PY"
fi
# Older keys' images: the running node imported its own already.
for d in "$ROOT"/python-* "$ROOT"/base-*; do [[ $d == "$PY" || $d == "$BASE" ]] || rm -rf "$d"; done

echo "$BASE/pause.tar"
echo "$BASE/busybox.tar"
echo "$PY/python.tar"
echo "$PY/driver.tar"
