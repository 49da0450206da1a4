"""The RBAC stratctl needs, least privilege, as data (`stratctl rbac` prints it).

Each rule is there because a command makes that request (the comment says which); an
end-to-end test binds a user to exactly this output and fails on any request of theirs
the API server forbids (tests/e2e/test_rbac.py, from the API server's audit log).

- **Role `stratctl`** in the study namespace: the study's jobs (Volcano and batch/v1),
  PodGroups, the headless Services of batch/v1 attempts (their pods' DNS names), its record
  ConfigMaps, its pods (read, and delete the orphans `delete` finds), pods/log (`logs`), events (why a gang waits).
- **ClusterRole `stratctl:<namespace>`**: what every submit reads outside the namespace —
  the namespace itself (only that one: resourceNames), PriorityClasses and Volcano queues
  (preflight refuses an unknown class or queue; queue fallback watches them),
  SelfSubjectAccessReviews (preflight asks what the user may do, so a refusal comes
  before anything is created).
- **ClusterRole `stratctl:cluster-reads`** (`--cluster-wide-reads`): the adaptive loop's
  signals — nodes (free GPUs), pods in every namespace (what holds those GPUs, and
  higher-priority gangs to yield to), HyperNodes (network topology). Without it stratctl
  still submits: each signal it cannot read is named once in a one-line warning, and the
  loop paces on what it can see.
- **Role `stratctl-report`** (`--report-service-account SA`): for trials that report
  intermediate values (`stratctl report`, a study with a pruner): get and patch pods, bound
  to the service account the trials run as.
- **The driver's objects** (`--driver`): what a study's driver pod (`submit --in-cluster`) runs
  as — ServiceAccount `stratctl-driver` with Role `stratctl-driver` (the Role `stratctl` less
  what only other commands ask), bound to `stratctl:<namespace>` and, with the cluster-wide
  reads, to `stratctl:cluster-reads`; and PriorityClass `stratctl-driver`, above the
  trials' classes, that preempts nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

READ = ["get", "list", "watch"]


@dataclass(frozen=True)
class Rule:
    groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()

    def manifest(self) -> dict[str, Any]:
        out = {"apiGroups": list(self.groups), "resources": list(self.resources)}
        if self.names:
            out["resourceNames"] = list(self.names)
        out["verbs"] = list(self.verbs)
        return out


NAMESPACED = (
    # submit creates attempts and deletes them (drain, cleanup, pruning, a changed trial);
    # status and the loop list and watch them; a trial given up is annotated (patch)
    Rule(("batch.volcano.sh",), ("jobs",), ("get", "list", "watch", "create", "patch", "delete")),
    Rule(("batch",), ("jobs",), ("get", "list", "watch", "create", "patch", "delete")),
    # workload: batch creates each attempt's PodGroup; why-pending reads them
    Rule(("scheduling.volcano.sh",), ("podgroups",), ("get", "list", "watch", "create", "delete")),
    # workload: batch creates each attempt's headless Service (its pods' DNS names, owned by
    # the Job: the garbage collector takes it); `delete` waits for them, and deletes one no job owns
    Rule(("",), ("services",), ("get", "list", "create", "delete")),
    # the study record (and preflight's server-side dry-run probe of the namespace)
    Rule(("",), ("configmaps",), ("get", "list", "create", "patch", "delete")),
    # results, run starts and preemptions from pods; `delete` removes orphaned ones
    Rule(("",), ("pods",), ("get", "list", "watch", "delete")),
    Rule(("",), ("pods/log",), ("get",)),
    # why a gang waits: the scheduler's events on its PodGroup
    Rule(("",), ("events",), ("list",)),
    # one driver per study: the submit loop's mark (run/driver.py), a Lease it takes, renews,
    # hands over and lets go; `delete` removes it
    Rule(("coordination.k8s.io",), ("leases",), ("get", "create", "patch", "delete")),
)


def namespace_rules(namespace: str) -> tuple[Rule, ...]:
    return (
        Rule(("",), ("namespaces",), ("get",), (namespace,)),
        Rule(("scheduling.k8s.io",), ("priorityclasses",), ("get", "list")),
        # watched too by a study that lists several queues (queue fallback)
        Rule(("scheduling.volcano.sh",), ("queues",), tuple(READ)),
        Rule(("authorization.k8s.io",), ("selfsubjectaccessreviews",), ("create",)),
    )


CLUSTER_READS = (
    Rule(("",), ("nodes",), tuple(READ)),
    Rule(("",), ("pods",), ("list", "watch")),
    Rule(("topology.volcano.sh",), ("hypernodes",), ("list", "watch")),
)

REPORT = (Rule(("",), ("pods",), ("get", "patch")),)

DRIVER_SERVICE_ACCOUNT = "stratctl-driver"
DRIVER_PRIORITY_CLASS = "stratctl-driver"
# Above every trial's class: the testbed's highest is stratctl-high (1000000, competing work);
# Kubernetes allows user classes up to 1000000000.
DRIVER_PRIORITY = 10_000_000

# What of the Role `stratctl` the submit loop never asks, so its driver pod goes without:
# Services listed, patched and deleted (`delete`, `submit --in-cluster`), ConfigMaps listed
# (`status`, `drain --all-noncritical`, shell completion).
_NOT_THE_LOOP = {("", "services"): {"list", "delete"}, ("", "configmaps"): {"list"}}


def _narrowed(rules: Iterable[Rule], dropped: dict[tuple[str, str], set[str]]) -> tuple[Rule, ...]:
    """`rules` less the `dropped` verbs of each (group, resource); a rule left with none goes."""
    out = []
    for rule in rules:
        drop = {v for g in rule.groups for r in rule.resources for v in dropped.get((g, r), ())}
        verbs = tuple(v for v in rule.verbs if v not in drop)
        if verbs:
            out.append(Rule(rule.groups, rule.resources, verbs, rule.names))
    return tuple(out)


DRIVER = _narrowed(NAMESPACED, _NOT_THE_LOOP)


@dataclass(frozen=True)
class Subject:
    kind: str  # User | Group | ServiceAccount
    name: str
    namespace: str | None = None  # of a ServiceAccount

    def manifest(self) -> dict[str, Any]:
        if self.kind == "ServiceAccount":
            return {"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}
        return {"apiGroup": "rbac.authorization.k8s.io", "kind": self.kind, "name": self.name}


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        **({"namespace": namespace} if namespace else {}),
        "labels": {"app.kubernetes.io/managed-by": "stratctl"},
    }


def _role(kind: str, name: str, namespace: str | None, rules: Iterable[Rule]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": _meta(name, namespace),
        "rules": [r.manifest() for r in rules],
    }


def _binding(
    kind: str, name: str, namespace: str | None, role_kind: str, role: str, subjects: Iterable[Subject]
) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": _meta(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [s.manifest() for s in subjects],
    }


def driver_manifests(namespace: str, cluster_wide_reads: bool = False) -> list[dict[str, Any]]:
    """What a study's driver pod in `namespace` runs as: its ServiceAccount, bound to the
    submit loop's rights, and its PriorityClass."""
    account = [Subject("ServiceAccount", DRIVER_SERVICE_ACCOUNT, namespace)]
    docs = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(DRIVER_SERVICE_ACCOUNT, namespace)},
        _role("Role", DRIVER_SERVICE_ACCOUNT, namespace, DRIVER),
        _binding("RoleBinding", DRIVER_SERVICE_ACCOUNT, namespace, "Role", DRIVER_SERVICE_ACCOUNT, account),
        # preflight and the loop read the namespace, PriorityClasses and queues, and review their rights
        _binding(
            "ClusterRoleBinding",
            f"{DRIVER_SERVICE_ACCOUNT}-{namespace}",
            None,
            "ClusterRole",
            f"stratctl:{namespace}",
            account,
        ),
    ]
    if cluster_wide_reads:
        docs.append(
            _binding(
                "ClusterRoleBinding",
                f"{DRIVER_SERVICE_ACCOUNT}-cluster-reads-{namespace}",
                None,
                "ClusterRole",
                "stratctl:cluster-reads",
                account,
            )
        )
    docs.append(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": _meta(DRIVER_PRIORITY_CLASS),
            "value": DRIVER_PRIORITY,
            # it waits for room rather than evict a trial; a trial of a lower class cannot evict it
            "preemptionPolicy": "Never",
            "globalDefault": False,
            "description": "stratctl's study driver pods (submit --in-cluster): ahead of trials, which "
            "need lower classes never to preempt a driver; a driver preempts no pod",
        }
    )
    return docs


def manifests(
    namespace: str,
    subjects: list[Subject],
    cluster_wide_reads: bool = False,
    report_service_account: str | None = None,
    driver: bool = False,
) -> list[dict[str, Any]]:
    """The Roles, ClusterRoles and bindings for `subjects` to run studies in `namespace`
    (and, with `driver`, what a study's driver pod runs as)."""
    suffix = "-".join(f"{s.kind.lower()}-{s.name}" for s in subjects)[:200]
    docs = [
        _role("Role", "stratctl", namespace, NAMESPACED),
        _binding("RoleBinding", f"stratctl-{suffix}", namespace, "Role", "stratctl", subjects),
        _role("ClusterRole", f"stratctl:{namespace}", None, namespace_rules(namespace)),
        _binding(
            "ClusterRoleBinding",
            f"stratctl:{namespace}:{suffix}",
            None,
            "ClusterRole",
            f"stratctl:{namespace}",
            subjects,
        ),
    ]
    if cluster_wide_reads:
        docs += [
            _role("ClusterRole", "stratctl:cluster-reads", None, CLUSTER_READS),
            _binding(
                "ClusterRoleBinding",
                f"stratctl:cluster-reads:{namespace}:{suffix}",
                None,
                "ClusterRole",
                "stratctl:cluster-reads",
                subjects,
            ),
        ]
    if report_service_account:
        docs += [
            _role("Role", "stratctl-report", namespace, REPORT),
            _binding(
                "RoleBinding",
                f"stratctl-report-{report_service_account}",
                namespace,
                "Role",
                "stratctl-report",
                [Subject("ServiceAccount", report_service_account, namespace)],
            ),
        ]
    if driver:
        docs += driver_manifests(namespace, cluster_wide_reads)
    return docs


def text(
    namespace: str,
    subjects: list[Subject],
    cluster_wide_reads: bool = False,
    report_service_account: str | None = None,
    command: str = "",
    driver: bool = False,
) -> str:
    """The manifests as YAML for `kubectl apply -f -`, headed by the command that printed them."""
    head = f"# {command}\n" if command else ""
    head += (
        "# What each rule is for: "
        "stratctl/backends/kubernetes/verbs/rbac.py; docs/admins/index.md (For cluster admins).\n"
    )
    if driver:
        head += (
            f"# {DRIVER_SERVICE_ACCOUNT} (ServiceAccount, Role, bindings, PriorityClass): what a study's "
            "driver pod (`submit --in-cluster`) runs as;\n# an admin applies them once per namespace.\n"
        )
    return head + yaml.safe_dump_all(
        manifests(namespace, subjects, cluster_wide_reads, report_service_account, driver),
        sort_keys=False,
        explicit_start=True,
    )
