#!/usr/bin/env bash
# The Debian packages the testbed runs (idempotent: installs only what is missing).
#   prometheus: the Prometheus server and promtool (scrapes the testbed; checks the rules)
#   postgresql: a database server the tests start as a local process (submit --storage)
#   a JDK and Maven: the YARN testbed (testbed/yarn/: Hadoop's MiniYARNCluster, its jars
#   resolved by Maven) and stratctl's gang application master (yarn-am/)
#   the real node (unless STRATCTL_TESTBED_REAL_NODE=0, see realnode.sh): containerd and
#   runc run its pods, the CNI plugins give them a network, iptables is what the kubelet
#   and the CNI plugins program, mmdebstrap and busybox-static make its images (images.sh)
set -euo pipefail
PACKAGES=(prometheus postgresql openjdk-17-jdk-headless maven)
PROBES=(prometheus "/usr/lib/postgresql/*/bin/initdb" javac mvn)  # a command, a path pattern, or dpkg:PACKAGE
if [[ ${STRATCTL_TESTBED_REAL_NODE:-1} != 0 ]]; then
  PACKAGES+=(containerd runc containernetworking-plugins iptables mmdebstrap busybox-static)
  PROBES+=(containerd runc /usr/lib/cni/bridge iptables mmdebstrap dpkg:busybox-static)
fi

installed() { # probe
  if [[ $1 == dpkg:* ]]; then
    [[ $(dpkg-query -W -f '${Status}' "${1#dpkg:}" 2>/dev/null) == "install ok installed" ]]
  else
    command -v "$1" >/dev/null 2>&1 || compgen -G "$1" >/dev/null
  fi
}
missing=()
for i in "${!PACKAGES[@]}"; do
  installed "${PROBES[$i]}" || missing+=("${PACKAGES[$i]}")
done
(( ${#missing[@]} == 0 )) && exit 0

if (( EUID == 0 )); then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "testbed: needs the Debian packages ${missing[*]}: run 'sudo apt-get install ${missing[*]}' (or run this as root)" >&2
  exit 1
fi
echo "testbed: installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
# The packages' own services are not started here (no systemd; the testbed runs its own).
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
