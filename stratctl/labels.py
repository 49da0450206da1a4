"""The names stratctl writes into the cluster: label and annotation keys, env var names.

These are the contract between rendering (which writes them), the controller and status
(which read them back to rebuild state from the cluster alone) and the trial's own code.
"""

import zlib

PREFIX = "stratctl.io"

# Labels (selectable): every object stratctl creates carries study and trial.
STUDY = f"{PREFIX}/study"
TRIAL = f"{PREFIX}/trial"  # the trial's base name (attempt-independent)
ATTEMPT = f"{PREFIX}/attempt"  # "0", "1", ...
SPEC_HASH = f"{PREFIX}/spec-hash"  # hash of the rendered manifests of this attempt
CRITICAL = f"{PREFIX}/critical"  # "true" | "false"
# which of SHARDS parts of its study a trial's objects fall in (a hash of the trial's name),
# so a study's jobs can be listed in parts at once; not covered by the spec hash
SHARD = f"{PREFIX}/shard"
SHARDS = 8
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "stratctl"
RECORD_PREFIX = "stratctl-study-"  # the name of a study's record ConfigMap, before the study's

# Merged submissions (backends/kubernetes/blocks/blocks.py): a block's Job, ConfigMap and pods carry
# BLOCK (the block's name); a trial's view read from a block carries IN_BLOCK instead
BLOCK = f"{PREFIX}/block"
IN_BLOCK = f"{PREFIX}/in-block"

# Annotations (free text).
PARAMS = f"{PREFIX}/params"  # JSON object of the trial's parameters
TRIAL_INDEX = f"{PREFIX}/trial-index"
CHECKPOINT = f"{PREFIX}/checkpoint"  # the trial's checkpoint location
# seconds the trial is expected to run (cost.expected_duration, when the study states it);
# on its pods too, so any launcher can tell when the GPUs they hold will be free again
EXPECTED_SECONDS = f"{PREFIX}/expected-seconds"
# the queue the attempt was sent to, when the study lists several (run/queues.py); the
# spec hash does not cover it, so a rerun adopts an attempt whichever queue it went to
QUEUE = f"{PREFIX}/queue"

# Environment variables injected into every container of a trial.
ENV_STUDY = "STRATCTL_STUDY"
ENV_TRIAL = "STRATCTL_TRIAL"
ENV_ATTEMPT = "STRATCTL_ATTEMPT"
ENV_CHECKPOINT = "STRATCTL_CHECKPOINT_DIR"
ENV_RESUME = "STRATCTL_RESUME"  # "1" when the attempt should resume from its checkpoint
ENV_PARAMS = "STRATCTL_PARAMS"  # JSON object of the trial's parameters
# the pod's own name (downward API), in studies with a pruner: where `stratctl report` writes
ENV_POD = "STRATCTL_POD"

# A pod's intermediate values, written by `stratctl report` inside the trial:
# {"<step>": {"<metric>": value, ...}, ...} (the latest steps); read by the submit loop's pruner.
REPORT = f"{PREFIX}/report"
TAKE_OVER = f"{PREFIX}/take-over"  # on a study's driver Lease: the driver that asked to take the study over
# a study's driver in the cluster (submit --in-cluster): its Job, ConfigMap, Service and pod carry
# this label, not STUDY (they are none of the study's trials)
DRIVER_OF = f"{PREFIX}/driver-of"
VERSION = f"{PREFIX}/version"  # the stratctl version that wrote the object (a driver's Lease, its Job)

# Annotations on a re-submitted attempt carrying the totals of the trial's earlier
# attempts, so `status` reads a trial's history from its latest job alone (older attempts
# may have been cleaned up).
# on a block's Job: its trials, a JSON list of [name, index, params, checkpoint, spec hash] by index
BLOCK_TRIALS = f"{PREFIX}/block-trials"
# on a trial's view read from a block, while it waits for its turn there: why (for `status`)
WAITS = f"{PREFIX}/waits"
BLOCK_SUSPENDED = f"{PREFIX}/block-suspended"  # ... and its block is suspended (drain): the trial is held
PREEMPTIONS = f"{PREFIX}/preemptions"  # preemptions before this attempt
FAILURES = f"{PREFIX}/failures"  # failed attempts before this attempt
GPU_SECONDS = f"{PREFIX}/gpu-seconds"  # GPU-seconds used by earlier attempts
GPU_SECONDS_LOST = f"{PREFIX}/gpu-seconds-lost"  # of those, lost to preemption
SUSPENSIONS = f"{PREFIX}/suspensions"  # times `drain` suspended the trial before this attempt
GIVEN_UP = f"{PREFIX}/given-up"  # set on the last attempt when recovery gives the trial up: why

# On an attempt created because the previous one could not go on for a reason that is
# neither a preemption nor a failure: why (`lost by the job controller`), for `status`.
REQUEUED_BECAUSE = f"{PREFIX}/requeued-because"
LOST = f"{PREFIX}/lost"  # attempts of the trial lost in a row before this one (lost.py)


def shard_of(trial: str) -> str:
    """The shard of a trial (every attempt of it in the same one)."""
    return str(zlib.crc32(trial.encode()) % SHARDS)
