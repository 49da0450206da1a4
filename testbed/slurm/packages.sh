#!/usr/bin/env bash
# The Debian packages the Slurm testbed runs (idempotent: apt is skipped when all are installed).
#   slurmctld, slurmd, slurm-client: Slurm (22.05 on Debian 12) controller, node daemon, CLI
#   munge: the authentication daemon Slurm's auth/munge uses
# The packages' own services are never started: a policy-rc.d that refuses (exit 101) is put
# in place while apt runs (the testbed starts its own daemons, see up.sh; there is no systemd).
set -euo pipefail
PACKAGES=(slurmctld slurmd slurm-client munge)

missing=()
for p in "${PACKAGES[@]}"; do
  [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
done
(( ${#missing[@]} == 0 )) && exit 0

if (( EUID == 0 )); then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "slurm testbed: needs the Debian packages ${missing[*]}: run 'sudo apt-get install ${missing[*]}' (or run this as root)" >&2
  exit 1
fi
echo "slurm testbed: installing Debian packages: ${missing[*]}" >&2

# Refuse service starts during the install (invoke-rc.d honours policy-rc.d), restoring any
# policy-rc.d that was there before.
policy=/usr/sbin/policy-rc.d
backup=
if [[ -e $policy ]]; then
  backup=$(mktemp)
  "${sudo[@]}" cp -p "$policy" "$backup"
fi
restore() {
  if [[ -n $backup ]]; then "${sudo[@]}" cp -p "$backup" "$policy"; rm -f "$backup"
  else "${sudo[@]}" rm -f "$policy"; fi
}
trap restore EXIT
printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
"${sudo[@]}" chmod 755 "$policy"

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}" >&2
