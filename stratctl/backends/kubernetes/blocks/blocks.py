"""Merged submissions on Kubernetes (core/merging.py says when): a block of trials is one
batch/v1 Indexed Job, each index one trial (pure functions over manifests and API objects).

- The Job's pods run on the Volcano scheduler (one PodGroup per Job, made by Volcano), at
  most `parallelism` of them at once: the loop keeps it to the adaptive target, raised as
  room comes, lowered only as far as its live pods (lowering it below them would delete
  pods, and a pod deleted before it ended counts against its index's retries).
- Each trial keeps its own parameters without an object of its own: its command line and
  environment are a script in the block's ConfigMap, key = its index, which the pod runs
  (`/bin/sh <mount>/$JOB_COMPLETION_INDEX`). The block's trials (name, index, parameters,
  checkpoint) are in an annotation of the Job, so the cluster alone tells every trial's
  state: a completed or failed index is its trial's outcome, a live pod its trial's run,
  an index without either waits in its block (queued).
- A pod failure policy ignores a disrupted pod (`DisruptionTarget`: Volcano's preemption,
  an eviction): its index runs again, from its checkpoint, not counted as a failure;
  `backoffLimitPerIndex` retries a failing trial in place as `backoffLimit` does for a Job
  of its own; an index out of retries is that trial's failed attempt, and its next attempt
  is a Job of its own, as without merging.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from stratctl import labels

INDEX = "batch.kubernetes.io/job-completion-index"  # annotation (and label) on an Indexed Job's pods
IGNORED = "batch.kubernetes.io/job-index-ignored-failure-count"  # disruptions the index went through
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"  # field selector: pods not ended


def block_name(study: str, n: int) -> str:
    return f"{study}-block-{n}"


def block_number(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


@dataclass(frozen=True)
class Listed:
    """One trial of a block, as the block's Job lists it."""

    name: str
    index: int  # the trial's index in the study
    params: dict[str, Any]
    checkpoint: str
    spec_hash: str = ""  # the trial's first attempt's, as a Job of its own would carry it

    def note(self) -> list[Any]:
        """Its entry in the block's list (the Job's annotation)."""
        return [self.name, self.index, self.params, self.checkpoint, self.spec_hash]


# ------------------------------------------------------------------ reading blocks back


def indexes(text: str | None) -> set[int]:
    """`status.completedIndexes` / `failedIndexes` ("1,3-5,7") as a set."""
    found: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        if low.isdigit() and (high.isdigit() or not high):
            found.update(range(int(low), int(high or low) + 1))
    return found


def is_block(job: dict[str, Any]) -> bool:
    return labels.BLOCK in ((job.get("metadata") or {}).get("labels") or {})


def listed_of(job: dict[str, Any]) -> list[Listed]:
    note = ((job.get("metadata") or {}).get("annotations") or {}).get(labels.BLOCK_TRIALS) or "[]"
    try:
        return [Listed(str(n), int(i), dict(p), str(c), str(h[0]) if h else "") for n, i, p, c, *h in json.loads(note)]
    except (ValueError, TypeError):
        return []


def index_of(pod: dict[str, Any]) -> int | None:
    meta = pod.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(INDEX) or (meta.get("labels") or {}).get(INDEX)
    return int(value) if value is not None and str(value).isdigit() else None


def _ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


@dataclass
class Block:
    """One block as last observed: its Job, and its trials' pods by index."""

    job: dict[str, Any]
    listed: list[Listed]
    pods: dict[int, dict[str, Any]] = field(default_factory=dict)  # index -> its latest pod

    @property
    def name(self) -> str:
        name: str = self.job["metadata"]["name"]
        return name

    @property
    def status(self) -> dict[str, Any]:
        return self.job.get("status") or {}

    @property
    def completed(self) -> set[int]:
        return indexes(self.status.get("completedIndexes"))

    @property
    def failed(self) -> set[int]:
        return indexes(self.status.get("failedIndexes"))

    @property
    def suspended(self) -> bool:
        return bool((self.job.get("spec") or {}).get("suspend"))

    @property
    def parallelism(self) -> int:
        return int((self.job.get("spec") or {}).get("parallelism") or 0)

    def live(self) -> dict[int, dict[str, Any]]:
        """Index -> its pod, for indexes whose pod is not finished."""
        done = self.completed | self.failed
        return {i: p for i, p in self.pods.items() if not _terminal(p) and i not in done}

    def running(self) -> int:
        return sum(1 for p in self.live().values() if _ready(p))

    def left(self) -> int:
        """Its trials that have not ended (running or queued)."""
        return len(self.listed) - len(self.completed | self.failed)

    def unfinished(self) -> bool:
        return len(self.completed | self.failed) < len(self.listed)

    def uncounted(self) -> dict[int, str]:
        """Index -> the phase of its pod that ended but the Job's status does not count yet
        (the job controller lags its pods by a moment): a Succeeded pod is its index's
        success; a Failed one is an index between two runs, or about to fail."""
        done = self.completed | self.failed
        return {i: p["status"]["phase"] for i, p in self.pods.items() if _terminal(p) and i not in done}

    def queued(self) -> list[str]:
        """Its trials that have neither ended nor a pod: they wait for their turn in it."""
        done, live, ending = self.completed | self.failed, self.live(), self.uncounted()
        return [t.name for i, t in enumerate(self.listed) if i not in done and i not in live and i not in ending]

    def why_queued(self) -> str:
        if self.suspended:
            return f"its block {self.name} is suspended (drain)"
        return f"queued in its block {self.name}: at most {self.parallelism} of its trials at once"

    def trial_jobs(self) -> list[dict[str, Any]]:
        """One batch/v1 Job-shaped view per trial of the block: what every reader
        of a trial's job (states, status, recovery) reads, as if the trial had a Job of its
        own (`<block>-<index>`; uid `<block uid>/<index>`, as its pods' `owner_uid`)."""
        meta, spec = self.job.get("metadata") or {}, self.job.get("spec") or {}
        ending = self.uncounted()
        done = self.completed | {i for i, phase in ending.items() if phase == "Succeeded"}
        failed, live = self.failed, self.live()
        given_up = meta.get("annotations") or {}
        shared_labels = {
            k: v for k, v in (meta.get("labels") or {}).items() if k not in (labels.BLOCK, labels.SPEC_HASH)
        }
        views = []
        for i, trial in enumerate(self.listed):
            pod = self.pods.get(i)
            pod_status = (pod or {}).get("status") or {}
            if i in done or i in failed:
                status: dict[str, Any] = {
                    "conditions": [_ended("Complete" if i in done else "Failed", pod, self.status)]
                }
            elif i in live or i in ending:  # a Failed pod not counted yet: in flight, between runs
                status = {"active": 1, "ready": 1 if i in live and _ready(live[i]) else 0}
            else:  # queued: pending, no pod yet
                status = {"active": 0, "ready": 0}
            if pod_status.get("startTime"):
                status["startTime"] = pod_status["startTime"]
            status["retryCount"] = int(((pod or {}).get("metadata") or {}).get("annotations", {}).get(IGNORED) or 0)
            notes = {
                labels.PARAMS: json.dumps(trial.params, separators=(",", ":")),
                labels.TRIAL_INDEX: str(trial.index),
                labels.CHECKPOINT: trial.checkpoint,
            }
            if (why := given_up.get(f"{labels.GIVEN_UP}.{i}")) is not None:
                notes[labels.GIVEN_UP] = why
            if not status.get("active") and "conditions" not in status:
                notes[labels.WAITS] = self.why_queued()
                if self.suspended:
                    notes[labels.BLOCK_SUSPENDED] = "true"
            views.append(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": f"{self.name}-{i}",
                        "namespace": meta.get("namespace"),
                        "uid": f"{meta.get('uid')}/{i}",
                        "creationTimestamp": meta.get("creationTimestamp"),
                        "labels": {
                            **shared_labels,
                            labels.TRIAL: trial.name,
                            labels.IN_BLOCK: self.name,
                            **({labels.SPEC_HASH: trial.spec_hash} if trial.spec_hash else {}),
                        },
                        "annotations": notes,
                    },
                    "spec": {"completions": 1, "parallelism": 1, "template": spec.get("template") or {}},
                    "status": status,
                }
            )
        return views


def _ended(kind: str, pod: dict[str, Any] | None, status: dict[str, Any]) -> dict[str, Any]:
    """A trial view's Complete or Failed condition, at its pod's end when the pod is known."""
    when = None
    for state in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        when = ((state.get("state") or {}).get("terminated") or {}).get("finishedAt") or when
    return {
        "type": kind,
        "status": "True",
        "reason": "FailedIndexes" if kind == "Failed" else "",
        "lastTransitionTime": when or status.get("completionTime") or "",
    }


def blocks_of(jobs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[Block]:
    """The study's blocks among its jobs, each with its pods (the latest of each index)."""
    blocks = {(j.get("metadata") or {}).get("uid"): Block(j, listed_of(j)) for j in jobs if is_block(j)}
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or ""):
        refs = (pod.get("metadata") or {}).get("ownerReferences") or []
        block = next((blocks[r.get("uid")] for r in refs if r.get("uid") in blocks), None)
        index = index_of(pod)
        if block is not None and index is not None:
            block.pods[index] = pod
    return sorted(blocks.values(), key=lambda b: block_number(b.name))


def expand(jobs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Block]]:
    """The study's jobs with every block replaced by its trials' views (`Block.trial_jobs`),
    and the blocks."""
    blocks = blocks_of(jobs, pods)
    if not blocks:
        return jobs, []
    out = [j for j in jobs if not is_block(j)]
    for block in blocks:
        out.extend(block.trial_jobs())
    return out, blocks


def parallelism_for(block: Block, target: int, flying_outside: int) -> int:
    """The block's parallelism for the adaptive target: the room the target leaves beside
    the study's trials in flight outside it, never below the block's live pods. Lowering
    `parallelism` below them makes the job controller delete pods, and a deleted pod that
    had not ended counts against its index's `backoffLimitPerIndex` (pending ones too: the
    pod garbage collector marks them Failed): the target comes down as pods end."""
    return max(1, target - flying_outside, len(block.live()))
