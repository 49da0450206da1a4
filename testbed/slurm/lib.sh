# shellcheck shell=bash
# Shared settings for testbed/slurm/{up,down}.sh. Every value can be overridden by env.
SLURM_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN=${STRATCTL_SLURM_RUN:-$HOME/.cache/stratctl/slurm-run}

NODES=${STRATCTL_SLURM_NODES:-4}                    # slurmd daemons, one per node: sn1..snN
GPUS_PER_NODE=${STRATCTL_SLURM_GPUS_PER_NODE:-4}    # fake GPUs (character devices) per node
CPUS_PER_NODE=${STRATCTL_SLURM_CPUS_PER_NODE:-8}    # declared, not real (config_overrides)
MEM_PER_NODE=${STRATCTL_SLURM_MEM_PER_NODE:-65536}  # MB, declared, not real
CTLD_PORT=${STRATCTL_SLURM_CTLD_PORT:-26817}        # slurmctld
SLURMD_PORT=${STRATCTL_SLURM_SLURMD_PORT:-26818}    # node i listens on SLURMD_PORT+i-1

CONF=$RUN/etc/slurm.conf
ENV_FILE=$RUN/env
MUNGE_SOCKET=$RUN/munge/munge.socket.2
# Set in the environment of every daemon this testbed starts (and so of the slurmstepd
# processes slurmd forks): down.sh finds stragglers by it, never by name.
MARKER=STRATCTL_SLURM_DAEMON_OF=$RUN

node_names() { local i; for (( i = 1; i <= NODES; i++ )); do echo "sn$i"; done; }
# Start order; down.sh stops them in reverse.
daemons() { echo munged; echo slurmctld; node_names | sed 's/^/slurmd-/'; }

sl_log() { echo "slurm testbed: $*" >&2; }

# Alive and not a zombie (orphans may be reparented to a pid 1 that never reaps).
pid_alive() {
  [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null || return 1
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
  [[ $state != Z ]]
}
daemon_pid() { cat "$RUN/pids/$1.pid" 2>/dev/null || true; }
