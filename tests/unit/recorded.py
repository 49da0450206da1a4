"""Objects as the testbed's API server returned them (Volcano 1.15, Kubernetes 1.35),
trimmed to the fields stratctl reads, for classification tests without a cluster.

Each helper returns a fresh deep copy so a test may mutate what it gets.
"""

from __future__ import annotations

import copy

from stratctl import labels

STUDY = "sweep"
TRIAL = "sweep-3f2a9c01d4"


def _job(name: str, attempt: int, status: dict, annotations: dict | None = None) -> dict:
    meta_labels = {
        labels.STUDY: STUDY,
        labels.TRIAL: TRIAL,
        labels.ATTEMPT: str(attempt),
        labels.SPEC_HASH: "5d1c0a7e9b2f",
        labels.CRITICAL: "false",
        labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
    }
    return copy.deepcopy(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": "stratctl-e2e",
                "uid": "7c0d6f6e-2b1e-4d3a-9b8e-0a1b2c3d4e5f",
                "creationTimestamp": "2025-05-01T10:00:00Z",
                "labels": meta_labels,
                "annotations": {
                    labels.PARAMS: '{"lr":0.01,"layers":4}',
                    labels.CHECKPOINT: f"s3://ckpt/{STUDY}/{TRIAL}",
                    **(annotations or {}),
                },
            },
            "spec": {
                "schedulerName": "volcano",
                "minAvailable": 2,
                "maxRetry": 3,
                "queue": "default",
                "policies": [
                    {"event": "PodEvicted", "action": "RestartJob"},
                    {"event": "PodFailed", "action": "AbortJob"},
                ],
                "tasks": [
                    {
                        "name": "worker",
                        "replicas": 2,
                        "minAvailable": 2,
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "worker",
                                        "image": "trainer:1",
                                        "resources": {
                                            "limits": {"nvidia.com/gpu": "2"},
                                            "requests": {"nvidia.com/gpu": "2"},
                                        },
                                    }
                                ]
                            }
                        },
                    }
                ],
            },
            "status": status,
        }
    )


def running_job() -> dict:
    """Gang scheduled, both pods running since 10:01."""
    return _job(
        TRIAL,
        0,
        {
            "state": {"phase": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"},
            "conditions": [
                {"status": "Pending", "lastTransitionTime": "2025-05-01T10:00:01Z"},
                {"status": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"},
            ],
            "minAvailable": 2,
            "running": 2,
            "version": 1,
        },
    )


def restarting_job() -> dict:
    """A pod was evicted at 10:31; the default policy restarts the gang (retryCount 1)."""
    return _job(
        TRIAL,
        0,
        {
            "state": {"phase": "Restarting", "lastTransitionTime": "2025-05-01T10:31:00Z"},
            "conditions": [
                {"status": "Pending", "lastTransitionTime": "2025-05-01T10:00:01Z"},
                {"status": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"},
                {"status": "Restarting", "lastTransitionTime": "2025-05-01T10:31:00Z"},
            ],
            "minAvailable": 2,
            "terminating": 2,
            "retryCount": 1,
            "version": 2,
        },
    )


def restarted_and_running_job() -> dict:
    """Restarted in place after the eviction and running again since 10:40."""
    return _job(
        TRIAL,
        0,
        {
            "state": {"phase": "Running", "lastTransitionTime": "2025-05-01T10:40:00Z"},
            "conditions": [
                {"status": "Restarting", "lastTransitionTime": "2025-05-01T10:31:00Z"},
                {"status": "Pending", "lastTransitionTime": "2025-05-01T10:31:05Z"},
                {"status": "Running", "lastTransitionTime": "2025-05-01T10:40:00Z"},
            ],
            "minAvailable": 2,
            "running": 2,
            "retryCount": 1,
            "version": 3,
        },
    )


def restarted_out_job(attempt: int = 0, annotations: dict | None = None) -> dict:
    """maxRetry=1: the first eviction (10:31) restarts the job and the restart fails it."""
    name = TRIAL if attempt == 0 else f"{TRIAL}-a{attempt}"
    job = _job(
        name,
        attempt,
        {
            "state": {"phase": "Failed", "lastTransitionTime": "2025-05-01T10:31:01Z"},
            "conditions": [
                {"status": "Pending", "lastTransitionTime": "2025-05-01T10:00:01Z"},
                {"status": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"},
                {"status": "Restarting", "lastTransitionTime": "2025-05-01T10:31:00Z"},
                {"status": "Failed", "lastTransitionTime": "2025-05-01T10:31:01Z"},
            ],
            "minAvailable": 2,
            "retryCount": 1,
            "version": 2,
        },
        annotations,
    )
    job["spec"]["maxRetry"] = 1
    return job


def aborted_job(attempt: int = 0, annotations: dict | None = None) -> dict:
    """A worker exited 1 at 10:20: PodFailed -> AbortJob. A real failure."""
    name = TRIAL if attempt == 0 else f"{TRIAL}-a{attempt}"
    return _job(
        name,
        attempt,
        {
            "state": {"phase": "Aborted", "lastTransitionTime": "2025-05-01T10:20:02Z"},
            "conditions": [
                {"status": "Pending", "lastTransitionTime": "2025-05-01T10:00:01Z"},
                {"status": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"},
                {"status": "Aborting", "lastTransitionTime": "2025-05-01T10:20:01Z"},
                {"status": "Aborted", "lastTransitionTime": "2025-05-01T10:20:02Z"},
            ],
            "minAvailable": 2,
            "failed": 1,
            "version": 2,
        },
        annotations,
    )


def completed_job() -> dict:
    return _job(
        TRIAL,
        0,
        {
            "state": {"phase": "Completed", "lastTransitionTime": "2025-05-01T11:01:00Z"},
            "conditions": [
                {"status": "Pending", "lastTransitionTime": "2025-05-01T10:00:01Z"},
                {"status": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"},
                {"status": "Completing", "lastTransitionTime": "2025-05-01T11:00:59Z"},
                {"status": "Completed", "lastTransitionTime": "2025-05-01T11:01:00Z"},
            ],
            "minAvailable": 2,
            "succeeded": 2,
            "version": 1,
        },
    )


def pending_job() -> dict:
    return _job(
        TRIAL,
        0,
        {
            "state": {"phase": "Pending", "lastTransitionTime": "2025-05-01T10:00:01Z"},
            "conditions": [{"status": "Pending", "lastTransitionTime": "2025-05-01T10:00:01Z"}],
            "minAvailable": 2,
            "pending": 2,
            "version": 1,
        },
    )


def evict_event(job: dict, when: str = "2025-05-01T10:31:00Z") -> dict:
    """The scheduler's event on the job's PodGroup when it evicts one of its pods."""
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}-{meta['uid']}.18a2b3c4d5e6f708", "namespace": "stratctl-e2e"},
        "involvedObject": {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "name": f"{meta['name']}-{meta['uid']}",
            "namespace": "stratctl-e2e",
        },
        "reason": "Evict",
        "message": "preempt",
        "type": "Normal",
        "count": 2,
        "firstTimestamp": when,
        "lastTimestamp": when,
        "source": {"component": "volcano"},
    }


def preempted_pod(job: dict) -> dict:
    """A pod the scheduler is evicting: DisruptionTarget set just before its deletion."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-worker-0",
            "namespace": "stratctl-e2e",
            "deletionTimestamp": "2025-05-01T10:31:00Z",
            "labels": {**job["metadata"]["labels"], "volcano.sh/job-name": name},
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "Evict",
                    "message": "Pod is evicted, because of preempt",
                },
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "volcano: preempting to accommodate a higher priority pod",
                },
            ],
        },
    }


def succeeded_pod(job: dict, message: str = '{"loss": 0.231, "accuracy": 0.912}') -> dict:
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-worker-0",
            "namespace": "stratctl-e2e",
            "labels": {**job["metadata"]["labels"], "volcano.sh/job-name": name, "volcano.sh/task-spec": "worker"},
        },
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [
                {
                    "name": "worker",
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "message": message,
                            "finishedAt": "2025-05-01T11:00:58Z",
                        }
                    },
                }
            ],
        },
    }


def unschedulable_podgroup(job: dict) -> dict:
    meta = job["metadata"]
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": f"{meta['name']}-{meta['uid']}",
            "namespace": "stratctl-e2e",
            "labels": dict(meta["labels"]),
            "ownerReferences": [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"minMember": 2, "queue": "default"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "reason": "NotEnoughResources",
                    "message": "2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable; "
                    "Pending: 2 Unschedulable",
                    "lastTransitionTime": "2025-05-01T10:00:02Z",
                    "transitionID": "5a6b",
                }
            ],
        },
    }


# -- workload: batch ---------------------------------------------------------------------
#
# A batch/v1 Job and its pods as the testbed's job controller (Kubernetes 1.35) wrote them,
# rendered from templates/batch-job.yaml.j2: 2 pods of 1 GPU. The job records no time at
# which its pods ran (status.startTime is when the controller first saw it); its pods do.

BATCH_UID = "9cb48c9a-c265-4c6c-9ff2-b0b56fd3499b"


def batch_job(status: dict, attempt: int = 0, annotations: dict | None = None) -> dict:
    name = TRIAL if attempt == 0 else f"{TRIAL}-a{attempt}"
    job = _job(name, attempt, status, annotations)
    job["apiVersion"] = "batch/v1"
    job["metadata"]["uid"] = BATCH_UID if attempt == 0 else f"{BATCH_UID[:-1]}{attempt}"
    job["spec"] = {
        "completions": 2,
        "parallelism": 2,
        "backoffLimit": 3,
        "podFailurePolicy": {
            "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
        },
        "template": {
            "metadata": {"annotations": {"scheduling.k8s.io/group-name": name}},
            "spec": {
                "schedulerName": "volcano",
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "worker",
                        "image": "trainer:1",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    }
    return job


def batch_running_job(attempt: int = 0, annotations: dict | None = None) -> dict:
    """Both pods placed and ready (they started at 10:01)."""
    return batch_job(
        {"startTime": "2025-05-01T10:00:00Z", "active": 2, "terminating": 0, "uncountedTerminatedPods": {}, "ready": 2},
        attempt,
        annotations,
    )


def batch_pending_job() -> dict:
    """Pods created, the gang waits for GPUs: active but not ready."""
    return batch_job(
        {"startTime": "2025-05-01T10:00:00Z", "active": 2, "terminating": 0, "uncountedTerminatedPods": {}, "ready": 0}
    )


def batch_completed_job() -> dict:
    return batch_job(
        {
            "conditions": [
                {
                    "type": "SuccessCriteriaMet",
                    "status": "True",
                    "lastTransitionTime": "2025-05-01T11:01:00Z",
                    "reason": "CompletionsReached",
                    "message": "Reached expected number of succeeded pods",
                },
                {
                    "type": "Complete",
                    "status": "True",
                    "lastTransitionTime": "2025-05-01T11:01:00Z",
                    "reason": "CompletionsReached",
                    "message": "Reached expected number of succeeded pods",
                },
            ],
            "startTime": "2025-05-01T10:00:00Z",
            "completionTime": "2025-05-01T11:01:00Z",
            "succeeded": 2,
            "terminating": 0,
            "uncountedTerminatedPods": {},
            "ready": 0,
        }
    )


def batch_preempted_job(attempt: int = 0, annotations: dict | None = None) -> dict:
    """A pod preempted at 10:31: failed by the pod failure policy. Reason and message as the
    job controller of Kubernetes 1.35 writes them (pkg/controller/job/pod_failure_policy.go);
    the testbed's KWOK nodes kill a deleted pod as a kubelet does, so tests/e2e/test_batch.py
    sees this reason on a real Job."""
    name = TRIAL if attempt == 0 else f"{TRIAL}-a{attempt}"
    message = f"Pod stratctl-e2e/{name}-x7k2p has condition DisruptionTarget matching FailJob rule at index 0"
    return batch_job(
        {
            "conditions": [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "lastTransitionTime": "2025-05-01T10:31:00Z",
                    "reason": "PodFailurePolicy",
                    "message": message,
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "lastTransitionTime": "2025-05-01T10:31:30Z",
                    "reason": "PodFailurePolicy",
                    "message": message,
                },
            ],
            "startTime": "2025-05-01T10:00:00Z",
            "failed": 1,
            "terminating": 0,
            "uncountedTerminatedPods": {},
            "ready": 0,
        },
        attempt,
        annotations,
    )


def batch_failed_job() -> dict:
    """Its pods kept exiting 1: retried in place backoffLimit times, then failed at 10:20."""
    return batch_job(
        {
            "conditions": [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "lastTransitionTime": "2025-05-01T10:20:00Z",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "lastTransitionTime": "2025-05-01T10:20:00Z",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                },
            ],
            "startTime": "2025-05-01T10:00:00Z",
            "failed": 4,
            "terminating": 0,
            "uncountedTerminatedPods": {},
            "ready": 0,
        }
    )


def batch_pod(
    job: dict, index: int = 0, phase: str = "Running", started: str = "2025-05-01T10:01:00Z", message: str | None = None
) -> dict:
    """A pod of a batch/v1 Job: owned by it, labelled by its job controller."""
    meta = job["metadata"]
    status = {"phase": phase, "startTime": started}
    if phase in ("Succeeded", "Failed"):
        terminated = {
            "exitCode": 0 if phase == "Succeeded" else 1,
            "startedAt": started,
            "finishedAt": "2025-05-01T11:00:58Z",
        }
        if message is not None:
            terminated["message"] = message
        status["containerStatuses"] = [{"name": "worker", "state": {"terminated": terminated}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{index}abcd",
            "namespace": "stratctl-e2e",
            "labels": {
                **meta["labels"],
                "batch.kubernetes.io/job-name": meta["name"],
                "job-name": meta["name"],
                "batch.kubernetes.io/controller-uid": meta["uid"],
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": ["batch.kubernetes.io/job-tracking"] if phase == "Running" else [],
        },
        "status": status,
    }


def disrupted(pod: dict, when: str = "2025-05-01T10:31:00Z", deleted: str | None = None) -> dict:
    """The pod as Volcano leaves it when it preempts it: DisruptionTarget, then deleted."""
    pod = copy.deepcopy(pod)
    pod["status"].setdefault("conditions", []).append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "volcano: preempting to accommodate a higher priority pod",
            "lastTransitionTime": when,
        }
    )
    if deleted:
        pod["metadata"]["deletionTimestamp"] = deleted
    return pod
