"""The study record: one ConfigMap per study that makes the cluster the source of truth.

It holds the study file as submitted, its spec hash and spec (to tell which fields a
rerun changed), and the control flags other
terminals steer with (drained, target parallelism), plus the outcomes of trials whose
jobs were cleaned up. `submit`, `status` and `drain` on any machine read the same record.
Building and parsing are pure; `records` reads them from a namespace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, VOLCANO_JOB
from stratctl.core import document
from stratctl.errors import NotFound, StratctlError, UsageError
from stratctl.run.heartbeat import live

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster

if TYPE_CHECKING:  # the study model stays off the start-up of commands that only read records
    from stratctl.core.spec import Study

PREFIX = labels.RECORD_PREFIX
API_QUOTA_KEY = "api-quota"  # the submit loop's note when the API quota pushes back: {"at": wall time, "note": text}
PLACEMENTS_KEY = "placements"  # a study listing several queues: {queue: trials whose latest attempt went there}
MOVED_KEY = "moved"  # trials taken out of a full queue into another (`submit --move-waiting`)
# a closed-loop search's ended trials as told to its sampler: {trial: {"index", "params",
# "state", "values"}}, so the search's history outlives the trials' jobs (backends/kubernetes/search/closedloop.py)
TOLD_KEY = "told"
API_QUOTA_FRESH = 60.0  # seconds a note is shown for: the loop rewrites it while the pressure lasts


# Set by `stratctl delete` before it deletes anything: a submit loop still following the
# study (`delete --force`) stops instead of creating its deleted trials again.
DELETING_KEY = "deleting"

# The submit loop's breaker drain, apart from a user's `drained` flag (which it never
# touches): {"at": wall time it tripped, "reason": text}, "" while the breaker is closed.
BREAKER_KEY = "breaker"


def breaker_value(reason: str, at: float | None) -> str:
    return json.dumps({"at": at, "reason": reason}, sort_keys=True) if reason else ""


def record_name(study_name: str) -> str:
    return f"{PREFIX}{study_name}"[:253]


@dataclass(frozen=True)
class StudyRecord:
    study: str
    spec_hash: str
    trials: int
    critical: bool = False
    drained: bool = False
    target: int | None = None  # the submit loop's latest target in flight
    reason: str = ""  # why the target is what it is
    finished: dict[str, str] = field(default_factory=dict)  # cleaned-up trial -> "succeeded" | "failed"
    source: str = ""  # the study file's text
    max_failures: int | None = None  # retries.max_failures, so status tells retrying from failed
    api_quota: str = ""  # when the API quota pushes back: what it does to the study ("" otherwise)
    api_quota_at: float | None = None  # wall time that note was written
    spec: str = ""  # the study spec as canonical JSON (study.changes.spec_text; "" when too large or older)
    breaker: str = ""  # why the submit loop's etcd breaker drained the study ("" when it does not)
    breaker_at: float | None = None  # wall time it tripped
    placements: dict[str, int] = field(default_factory=dict)  # queue -> trials there (queue fallback)
    moved: int = 0  # trials moved to another queue before they started
    told: dict[str, dict[str, Any]] = field(default_factory=dict)  # closed-loop search: ended trials as told
    deleting: bool = False  # `stratctl delete` is taking the study out: a loop following it stops

    @classmethod
    def of(cls, study: Study, trials: int, source: str) -> StudyRecord:
        """The record a submit of `study` (its file's text: `source`) writes for `trials` trials."""
        from stratctl.core.changes import spec_text

        return cls(
            study=study.name,
            spec_hash=study.spec_hash,
            trials=trials,
            critical=study.critical,
            source=source,
            max_failures=study.retries.max_failures,
            spec=spec_text(study),
        )

    @property
    def held(self) -> bool:
        """Whether suspended trials stay suspended and nothing new starts: drained by a user
        (`drain`), or by the etcd breaker (`throttle.on_breaker: drain`)."""
        return self.drained or bool(self.breaker)


def record_manifest(record: StudyRecord, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": record_name(record.study),
            "namespace": namespace,
            "labels": {
                labels.STUDY: record.study,
                labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
                labels.CRITICAL: "true" if record.critical else "false",
                labels.SPEC_HASH: record.spec_hash,
            },
        },
        "data": record_data(record),
    }


def record_data(record: StudyRecord) -> dict[str, str]:
    return {
        "study.yaml": record.source,
        "spec-hash": record.spec_hash,
        "trials": str(record.trials),
        "critical": "true" if record.critical else "false",
        "drained": "true" if record.drained else "false",
        "target": "" if record.target is None else str(record.target),
        "reason": record.reason,
        "finished": json.dumps(record.finished, sort_keys=True),
        "max-failures": "" if record.max_failures is None else str(record.max_failures),
        API_QUOTA_KEY: json.dumps({"at": record.api_quota_at, "note": record.api_quota}) if record.api_quota else "",
        "spec": record.spec,
        BREAKER_KEY: breaker_value(record.breaker, record.breaker_at),
        PLACEMENTS_KEY: json.dumps(record.placements, sort_keys=True) if record.placements else "",
        MOVED_KEY: str(record.moved) if record.moved else "",
        TOLD_KEY: json.dumps(record.told, sort_keys=True, separators=(",", ":")) if record.told else "",
    }


def _json_object(text: str | None) -> dict[str, Any]:
    """A record key holding a JSON object; {} when absent or unreadable."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def api_quota_of(record: StudyRecord, now: float) -> str:
    """The API-quota note to show at wall time `now`: only while its loop keeps it fresh."""
    if not record.api_quota or record.api_quota_at is None or now - record.api_quota_at > API_QUOTA_FRESH:
        return ""
    return record.api_quota


def parse_record(configmap: dict[str, Any]) -> StudyRecord:
    data = configmap.get("data") or {}
    meta_labels = (configmap.get("metadata") or {}).get("labels") or {}
    target = data.get("target") or ""
    try:
        finished = json.loads(data.get("finished") or "{}")
    except ValueError:
        finished = {}
    quota = _json_object(data.get(API_QUOTA_KEY))
    at = quota.get("at")
    breaker = _json_object(data.get(BREAKER_KEY))
    tripped = breaker.get("at")
    return StudyRecord(
        study=meta_labels.get(labels.STUDY, ""),
        spec_hash=data.get("spec-hash", ""),
        trials=int(data.get("trials") or 0),
        critical=data.get("critical") == "true",
        drained=data.get("drained") == "true",
        target=int(target) if target.isdigit() else None,
        reason=data.get("reason", ""),
        finished=finished if isinstance(finished, dict) else {},
        source=data.get("study.yaml", ""),
        max_failures=int(data["max-failures"]) if (data.get("max-failures") or "").isdigit() else None,
        api_quota=note if isinstance(note := quota.get("note"), str) else "",
        api_quota_at=float(at) if isinstance(at, int | float) else None,
        spec=data.get("spec", ""),
        breaker=reason if isinstance(reason := breaker.get("reason"), str) else "",
        breaker_at=float(tripped) if isinstance(tripped, int | float) else None,
        placements=_counts(data.get(PLACEMENTS_KEY)),
        moved=int(data[MOVED_KEY]) if (data.get(MOVED_KEY) or "").isdigit() else 0,
        told={k: v for k, v in _json_object(data.get(TOLD_KEY)).items() if isinstance(v, dict)},
        deleting=data.get(DELETING_KEY) == "true",
    )


def _counts(text: str | None) -> dict[str, int]:
    try:
        counts = json.loads(text or "{}")
    except ValueError:
        return {}
    return {str(k): v for k, v in counts.items() if isinstance(v, int)} if isinstance(counts, dict) else {}


def job_kinds(source: str) -> tuple[tuple[str, str], ...]:
    """The kind of job a study's trials run as (`workload`), from the study text kept in its
    record (read with the same safe loader and alias limits as a study file); both kinds
    when the text cannot be read, so no trial is overlooked."""
    try:
        data = document.parse(source, "<study record>").data
    except StratctlError:
        return (VOLCANO_JOB, BATCH_JOB)
    if not isinstance(data, dict):
        return (VOLCANO_JOB, BATCH_JOB)
    return (BATCH_JOB,) if data.get("workload") == "batch" else (VOLCANO_JOB,)


def space_order(source: str) -> list[str]:
    """The parameter names in the order the study file's `space` lists them (what `plan`
    shows), from the study text kept in its record; [] when it cannot be read."""
    try:
        data = document.parse(source, "<study record>").data
    except StratctlError:
        return []
    space = data.get("space") if isinstance(data, dict) else None
    return [str(k) for k in space] if isinstance(space, dict) else []


# -- suspension marks ------------------------------------------------------------------
#
# `drain` deletes the running attempts of a study and marks each trial here, under a key
# the submit loop never writes: {trial: {"attempt": n, <carried totals>}}. The next
# attempt (created by `resume` or by a submit loop once the study is no longer drained)
# resumes from the checkpoint; `resume` clears the marks it has acted on. A mark the etcd
# breaker made says so ("by": "breaker"): `resume` leaves those to the submit loop.

SUSPENDED_KEY = "suspended"


def suspended_of(configmap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    try:
        marks = json.loads((configmap.get("data") or {}).get(SUSPENDED_KEY) or "{}")
    except ValueError:
        return {}
    return (
        {k: v for k, v in marks.items() if isinstance(v, dict) and isinstance(v.get("attempt"), int)}
        if isinstance(marks, dict)
        else {}
    )


def suspended_patch(marks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"data": {SUSPENDED_KEY: json.dumps(marks, sort_keys=True)}}


# -- the submit loop's heartbeat --------------------------------------------------------
#
# A submit loop following the study says so under LOOP_KEY: {"at": wall time, "running":
# bool, "host", "pid"}, refreshed with every summary it writes (at least every 20 s) and
# set to not running when it stops. A marker older than LOOP_STALE is a loop that died
# without saying so (killed, its machine gone): `delete` treats it as not running.

LOOP_KEY = "loop"
LOOP_STALE = 90.0


def loop_data(at: float, running: bool, host: str = "", pid: int | None = None) -> dict[str, str]:
    return {LOOP_KEY: json.dumps({"at": at, "running": running, "host": host, "pid": pid}, sort_keys=True)}


def loop_following(configmap: dict[str, Any], now: float, stale: float = LOOP_STALE) -> dict[str, Any] | None:
    """The marker of a submit loop following the study at wall time `now`, or None."""
    try:
        marker = json.loads((configmap.get("data") or {}).get(LOOP_KEY) or "null")
    except ValueError:
        return None
    return live(marker, now, stale)


def followed(cluster: Cluster, namespace: str, study: str, now: float) -> bool:
    """Whether a submit loop follows the study now (its heartbeat in the record); a study
    with no record is followed by nothing."""
    try:
        return loop_following(cluster.get(CONFIGMAP, record_name(study), namespace), now) is not None
    except NotFound:
        return False


MANAGED = f"{labels.MANAGED_BY}={labels.MANAGED_BY_VALUE}"


def records(
    cluster: Cluster,
    namespace: str | None,
    study: str | None,
    selector: str | None = None,
    all_namespaces: bool = False,
) -> list[dict[str, Any]]:
    """The study's record, or those of every study (matching a label selector) of the
    namespace, or of every namespace."""
    if study:
        try:
            return [cluster.get(CONFIGMAP, record_name(study), namespace)]
        except NotFound:
            raise UsageError(
                f"no study {study!r} in namespace {namespace} (no ConfigMap {record_name(study)})"
            ) from None
    query = ",".join(filter(None, [MANAGED, selector]))
    if all_namespaces:
        items, _ = cluster.list(CONFIGMAP, label_selector=query, all_namespaces=True)
    else:
        items, _ = cluster.list(CONFIGMAP, namespace, label_selector=query)
    mine = [cm for cm in items if cm["metadata"]["name"].startswith(PREFIX)]
    return sorted(mine, key=lambda cm: cm["metadata"]["name"])
