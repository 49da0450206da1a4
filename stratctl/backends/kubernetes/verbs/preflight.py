"""Preflight: whether a study can run on this cluster at all, decided before `submit`
creates anything.

A study naming a queue or PriorityClass the cluster lacks, or a pod no node can hold,
would be accepted by the API server and then wait for ever; a user without the right to
create jobs would be refused only after the study's record was written. So `submit` (and
`submit --dry-run=server`) first reads the cluster's facts (`kube.facts`) and `check`
turns them into problems (pure: facts in, problems out), every one of them reported at
once, each located at the study field it concerns:

- the namespace exists; every listed Volcano queue exists and is Open; the PriorityClass exists;
- every pod of a trial fits some Ready node's allocatable (its nodeSelector honoured), a
  whole gang fits the empty cluster, and a listed queue's `spec.capability` holds a gang;
- the user may make every kind of request `submit` makes (`accesses`).

A problem with the study (a name the cluster lacks, a pod too large) exits 2, like any
other invalid input; as soon as one is the cluster's refusal (a permission, no Volcano)
the exit is 3. A fact the user may not read is not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from stratctl.backends.kubernetes.objects.podfit import Pod, distinct, fit, pods_of, shown
from stratctl.backends.kubernetes.objects.record import StudyRecord, record_manifest
from stratctl.backends.kubernetes.verbs import facts as cluster_facts
from stratctl.backends.kubernetes.verbs.facts import Access, Facts
from stratctl.core.quantity import parse
from stratctl.core.spec import Study
from stratctl.errors import ExitCode, Problem, StudyError

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster


class PreflightError(StudyError):
    """The study cannot run on this cluster: every reason, located (exit 2, or 3 when one
    is the cluster's refusal)."""

    def __init__(self, problems: list[Problem], exit_code: ExitCode = ExitCode.INVALID_INPUT):
        super().__init__(problems)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Finding:
    problem: Problem
    cluster: bool = False  # the cluster refuses (exit 3), rather than the study being wrong (exit 2)


# -- what submit asks of the API server ------------------------------------------------

VOLCANO = "batch.volcano.sh"
SCHEDULING = "scheduling.volcano.sh"


def accesses(study: Study, watch_cluster: bool = True, services: bool | None = None) -> list[Access]:
    """Every kind of request `submit` makes for `study`. `watch_cluster`: the loop mirrors
    nodes and pods cluster-wide for its GPU signal (not with `--detach`); `services`: its
    attempts create Services (default: workload batch, whose pods' DNS names are one's)."""
    ns = study.namespace
    jobs = (VOLCANO, "jobs") if study.workload == "volcano" else ("batch", "jobs")
    needed = [
        Access(verb, *jobs, ns, "submit runs each trial as one")
        for verb in ("create", "get", "list", "watch", "patch", "delete")
    ]
    group_verbs = ("list", "watch") if study.workload == "volcano" else ("create", "get", "list", "watch", "delete")
    needed += [
        Access(verb, SCHEDULING, "podgroups", ns, "submit follows each trial's gang in one") for verb in group_verbs
    ]
    needed += [
        Access(verb, "", "configmaps", ns, "submit keeps the study's record in one")
        for verb in ("create", "get", "patch")
    ]
    if study.workload == "batch" if services is None else services:
        needed += [
            Access(verb, "", "services", ns, "each trial's pods are named under a headless Service")
            for verb in ("create", "get")
        ]
    needed += [
        Access("list", "", "pods", ns, "submit reads how trials ended from them"),
        Access("list", "", "events", ns, "submit reads how trials ended from them"),
    ]
    if watch_cluster:
        needed += [
            Access(verb, "", kind, None, CLUSTER_READ) for kind in ("nodes", "pods") for verb in ("list", "watch")
        ]
    return needed


CLUSTER_READ = "submit counts the free GPUs from them"  # optional: without them the loop goes without its GPU signal


def degraded(facts: Facts) -> str | None:
    """The one line a submit says when it may not read nodes and pods across the cluster
    (it goes on without its GPU signal), else None."""
    refused = [a for a in facts.denied if a.why == CLUSTER_READ]
    if not refused:
        return None
    what = ", ".join(sorted({a.resource for a in refused}))
    verbs = ", ".join(sorted({a.verb for a in refused}))
    return (
        f"not permitted to {verbs} {what} across the cluster: no GPU signal and no yielding to higher-priority "
        "gangs, the target follows pending gangs and the API's answers only (an admin grants the reads with "
        "`stratctl rbac --cluster-wide-reads`)"
    )


# -- the checks --------------------------------------------------------------------------


def check(
    study: Study, facts: Facts, trials: Iterable[list[dict[str, Any]]], namespace_flag: bool = False
) -> list[Finding]:
    """Everything that stops `study` running on the cluster `facts` describe, each located
    at its field. `trials`: the manifests of each trial (their pods are what must fit);
    `namespace_flag`: the namespace came from `--namespace`, not the study file."""
    findings: list[Finding] = []
    at = study.problem
    if namespace_flag:

        def at_namespace(message: str) -> Problem:
            return Problem("--namespace", None, None, message)
    else:

        def at_namespace(message: str) -> Problem:
            return at(("namespace",), f"namespace: {message}")

    if facts.namespace_exists is False:
        findings.append(Finding(at_namespace(f"namespace {facts.namespace!r} does not exist in the cluster")))
    findings += _queue(study, facts)
    if (
        study.priority_class
        and facts.priority_classes is not None
        and study.priority_class not in facts.priority_classes
    ):
        findings.append(
            Finding(
                at(
                    ("priority_class",),
                    f"priority_class: no PriorityClass {study.priority_class!r} "
                    f"in the cluster ({_known('priority classes', facts.priority_classes)})",
                )
            )
        )
    shapes = distinct(pods_of(m) for m in trials)
    if facts.nodes is not None:
        findings += [Finding(problem) for problem in fit(study, facts.nodes, shapes)]
    findings += _capability(study, facts, shapes)
    findings += _denied(study, facts, at_namespace)
    return findings


def exit_code(findings: list[Finding]) -> ExitCode:
    return ExitCode.CLUSTER if any(f.cluster for f in findings) else ExitCode.INVALID_INPUT


def _known(what: str, names: Iterable[str]) -> str:
    names = sorted(n for n in names if n)
    return f"{what}: {', '.join(names)}" if names else f"it has no {what}"


def _queue_at(study: Study, index: int) -> tuple[Any, ...]:
    """Where the study file names its `index`-th queue."""
    return ("queue",) if isinstance(study.queue, str) else ("queue", index)


def _queue(study: Study, facts: Facts) -> list[Finding]:
    if not facts.volcano:
        return [
            Finding(
                study.problem(
                    ("queue",),
                    "queue: the cluster has no Volcano queues (no API "
                    "scheduling.volcano.sh/v1beta1 queues): is Volcano installed?",
                ),
                cluster=True,
            )
        ]
    if facts.queues is None:
        return []
    findings = []
    for index, name in enumerate(study.queues):  # every listed queue: a trial may go to any of them
        where = _queue_at(study, index)
        field = ".".join(map(str, where))
        queue = facts.queues.get(name)
        if queue is None:
            findings.append(
                Finding(
                    study.problem(
                        where, f"{field}: no Volcano queue {name!r} in the cluster ({_known('queues', facts.queues)})"
                    )
                )
            )
            continue
        state = ((queue.get("status") or {}).get("state")) or "Open"
        if state != "Open":
            findings.append(
                Finding(
                    study.problem(
                        where,
                        f"{field}: Volcano queue {name!r} is {state}: it admits no "
                        "new gang (open it, or name an Open queue)",
                    )
                )
            )
    return findings


def _capability(study: Study, facts: Facts, shapes: list[list[Pod]]) -> list[Finding]:
    """A gang must fit the capability of at least one listed queue (the queues it exceeds
    are passed over; with one queue, that one)."""
    findings = []
    for index, name in enumerate(study.queues):
        finding = _exceeds(study, facts, shapes, index, name)
        if finding is None:
            return []
        findings.append(finding)
    return findings


def _exceeds(study: Study, facts: Facts, shapes: list[list[Pod]], index: int, name: str) -> Finding | None:
    queue = (facts.queues or {}).get(name)
    capability = ((queue or {}).get("spec") or {}).get("capability") or {}
    where = _queue_at(study, index)
    for pods in shapes:
        for resource, cap in sorted(capability.items()):
            need = sum(((parse(p.requests.get(resource, "0")) or Decimal(0)) * p.gang for p in pods), Decimal(0))
            limit = parse(cap)
            if limit is not None and need > limit:
                return Finding(
                    study.problem(
                        where,
                        f"{'.'.join(map(str, where))}: Volcano queue {name!r} holds at "
                        f"most {cap} {resource} (spec.capability), and one gang needs "
                        f"{shown(need, resource)}",
                    )
                )
    return None


def _denied(study: Study, facts: Facts, at_namespace: Callable[[str], Problem]) -> list[Finding]:
    """One line per resource the user may not use as submit needs, with every verb refused."""
    creates = [a for a in facts.denied if a.namespace is not None and a.verb == "create"]
    if facts.namespace_exists is None and {a.resource for a in creates} >= {"jobs", "configmaps"}:
        # may create nothing there, and namespaces are not readable: it may well not exist. One line, not one per right
        what = " or ".join(sorted({a.what for a in creates}))
        return [
            Finding(
                at_namespace(
                    f"namespace {facts.namespace!r} does not exist, or you have no rights in it "
                    f"(not permitted to create {what} there)"
                ),
                cluster=True,
            )
        ] + _denied(
            study,
            Facts(facts.namespace, facts.namespace_exists, denied=[a for a in facts.denied if a.namespace is None]),
            at_namespace,
        )
    if facts.namespace_exists is False:  # rights in a namespace that does not exist mean nothing
        denied = [a for a in facts.denied if a.namespace is None]
    else:
        denied = facts.denied
    grouped: dict[tuple[str, str | None], list[Access]] = {}
    for access in denied:
        if access.why == CLUSTER_READ:  # not a refusal: the loop goes without (`degraded`)
            continue
        grouped.setdefault((access.what, access.namespace), []).append(access)
    findings = []
    for (what, namespace), refused in grouped.items():
        verbs = ", ".join(a.verb for a in refused)
        why = refused[0].why
        if namespace is not None:
            problem = at_namespace(f"not permitted to {verbs} {what} in namespace {namespace!r}: {why}")
        else:
            problem = Problem(
                str(study.source or "<study>"), None, None, f"not permitted to {verbs} {what} across the cluster: {why}"
            )
        findings.append(Finding(problem, cluster=True))
    return findings


# -- the edge ------------------------------------------------------------------------------


def preflight(
    cluster: Cluster,
    study: Study,
    trials: Iterable[list[dict[str, Any]]],
    namespace_flag: bool = False,
    watch_cluster: bool = True,
) -> str | None:
    """Read the cluster's facts and raise `PreflightError` with every problem found; nothing
    is created (the namespace probe and the access reviews store nothing). Returns the
    line saying what the loop goes without, when the user may not read nodes and pods."""
    cluster.reach()  # the first contact: an API server out of reach is told within START_PATIENCE
    probe = record_manifest(StudyRecord(study.name, study.spec_hash, 0), study.namespace)
    trials = list(trials)
    services = study.workload == "batch" or any(doc.get("kind") == "Service" for docs in trials for doc in docs)
    found = cluster_facts.read(cluster, study.namespace, accesses(study, watch_cluster, services), probe)
    findings = check(study, found, trials, namespace_flag)
    if findings:
        raise PreflightError([f.problem for f in findings], exit_code(findings))
    return degraded(found)
