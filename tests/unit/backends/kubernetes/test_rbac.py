"""`stratctl rbac` (backends/kubernetes/verbs/rbac.py): the committed manifests are its output, and it prints
what admins apply."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from stratctl.backends.kubernetes.verbs.preflight import accesses
from stratctl.backends.kubernetes.verbs.rbac import (
    DRIVER,
    DRIVER_PRIORITY_CLASS,
    DRIVER_SERVICE_ACCOUNT,
    NAMESPACED,
    Subject,
    manifests,
    namespace_rules,
    text,
)
from stratctl.backends.launch import prepare
from stratctl.cli.main import app

REPO = Path(__file__).resolve().parents[4]

COMMITTED = {
    "deploy/rbac.yaml": (
        "stratctl",
        [Subject("ServiceAccount", "stratctl", "stratctl")],
        True,
        "stratctl rbac -n stratctl --service-account stratctl --cluster-wide-reads",
    ),
    "testbed/rbac.yaml": (
        "stratctl-e2e",
        [Subject("User", "trial-runner")],
        True,
        "stratctl rbac -n stratctl-e2e --user trial-runner --cluster-wide-reads --driver",
    ),
    "testbed/rbac-no-nodes.yaml": (
        "stratctl-e2e",
        [Subject("User", "no-node-reader")],
        False,
        "stratctl rbac -n stratctl-e2e --user no-node-reader",
    ),
}


def test_the_committed_manifests_are_the_commands_output():
    for path, (namespace, subjects, reads, command) in COMMITTED.items():
        driver = "--driver" in command
        assert (REPO / path).read_text() == text(namespace, subjects, reads, command=command, driver=driver), (
            f"{path} is stale: regenerate it with `{command} > {path}`"
        )


def test_the_command_prints_them_for_kubectl_apply():
    out = CliRunner().invoke(
        app, ["rbac", "-n", "ml", "--user", "ada", "--group", "researchers", "--report-service-account", "trainer"]
    )
    assert out.exit_code == 0, out.output
    docs = [d for d in yaml.safe_load_all(out.output) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Role", "stratctl"),
        ("RoleBinding", "stratctl-user-ada-group-researchers"),
        ("ClusterRole", "stratctl:ml"),
        ("ClusterRoleBinding", "stratctl:ml:user-ada-group-researchers"),
        ("Role", "stratctl-report"),
        ("RoleBinding", "stratctl-report-trainer"),
    ]
    assert docs[1]["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "ada"},
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "researchers"},
    ]
    assert docs[5]["subjects"] == [{"kind": "ServiceAccount", "name": "trainer", "namespace": "ml"}]
    assert docs[4]["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}]
    # the namespace is read by name only
    [ns_rule] = [r for r in docs[2]["rules"] if r["resources"] == ["namespaces"]]
    assert ns_rule == {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["ml"], "verbs": ["get"]}


def test_the_default_subject_is_a_service_account_for_ci_and_reads_are_opt_in():
    out = CliRunner().invoke(app, ["rbac"])
    docs = [d for d in yaml.safe_load_all(out.output) if d]
    assert docs[1]["subjects"] == [{"kind": "ServiceAccount", "name": "stratctl", "namespace": "default"}]
    assert "stratctl:cluster-reads" not in out.output
    wide = manifests("default", [Subject("User", "u")], cluster_wide_reads=True)
    [reads] = [d for d in wide if d["metadata"]["name"] == "stratctl:cluster-reads"]
    assert {r["resources"][0] for r in reads["rules"]} == {"nodes", "pods", "hypernodes"}
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in reads["rules"])


def _docs(*args: str) -> list[dict]:
    out = CliRunner().invoke(app, ["rbac", *args])
    assert out.exit_code == 0, out.output
    return [d for d in yaml.safe_load_all(out.output) if d]


def _granted(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(v, g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_driver_prints_what_a_driver_pod_runs_as_after_the_users_rbac():
    docs = _docs("-n", "ml", "--user", "ada", "--cluster-wide-reads", "--driver")
    account = [{"kind": "ServiceAccount", "name": "stratctl-driver", "namespace": "ml"}]
    assert (DRIVER_SERVICE_ACCOUNT, DRIVER_PRIORITY_CLASS) == ("stratctl-driver", "stratctl-driver")
    assert [(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs[6:]] == [
        ("ServiceAccount", "stratctl-driver", "ml"),
        ("Role", "stratctl-driver", "ml"),
        ("RoleBinding", "stratctl-driver", "ml"),
        ("ClusterRoleBinding", "stratctl-driver-ml", None),
        ("ClusterRoleBinding", "stratctl-driver-cluster-reads-ml", None),
        ("PriorityClass", "stratctl-driver", None),
    ]
    sa, role, binding, namespace_reads, cluster_reads, priority = docs[6:]
    assert sa == {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "stratctl-driver",
            "namespace": "ml",
            "labels": {"app.kubernetes.io/managed-by": "stratctl"},
        },
    }  # no automountServiceAccountToken: the pod's own spec decides
    assert role["rules"] == [r.manifest() for r in DRIVER]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "stratctl-driver"}
    assert binding["subjects"] == account
    # the ClusterRoles it is bound to are the ones the same output defines
    assert namespace_reads["roleRef"]["name"] == "stratctl:ml" == docs[2]["metadata"]["name"]
    assert cluster_reads["roleRef"]["name"] == "stratctl:cluster-reads" == docs[4]["metadata"]["name"]
    assert namespace_reads["subjects"] == cluster_reads["subjects"] == account
    assert priority["apiVersion"] == "scheduling.k8s.io/v1"
    assert (priority["value"], priority["preemptionPolicy"], priority["globalDefault"]) == (10_000_000, "Never", False)
    assert "driver" in priority["description"]
    # without the cluster-wide reads, no binding to them
    assert [(d["kind"], d["metadata"]["name"]) for d in _docs("-n", "ml", "--driver")[4:]] == [
        ("ServiceAccount", "stratctl-driver"),
        ("Role", "stratctl-driver"),
        ("RoleBinding", "stratctl-driver"),
        ("ClusterRoleBinding", "stratctl-driver-ml"),
        ("PriorityClass", "stratctl-driver"),
    ]
    head = CliRunner().invoke(app, ["rbac", "--driver"]).output.split("---")[0]
    assert "driver pod (`submit --in-cluster`) runs as" in head and "once per namespace" in head


def test_the_driver_role_is_the_submit_users_less_what_only_other_commands_ask():
    driver, user = _granted([r.manifest() for r in DRIVER]), _granted([r.manifest() for r in NAMESPACED])
    assert driver <= user
    assert user - driver == {
        ("list", "", "services"),
        ("delete", "", "services"),
        ("list", "", "configmaps"),
    }
    for verbs, group, resource in [
        (("get", "list", "watch", "create", "patch", "delete"), "batch.volcano.sh", "jobs"),
        (("get", "list", "watch", "create", "patch", "delete"), "batch", "jobs"),
        (("get", "create", "patch", "delete"), "", "configmaps"),
        (("get", "create"), "", "services"),
        (("get", "create", "patch", "delete"), "coordination.k8s.io", "leases"),
        (("get", "list", "watch"), "", "pods"),
        (("get",), "", "pods/log"),
        (("list",), "", "events"),
    ]:
        assert {(v, group, resource) for v in verbs} <= driver, resource


def test_the_driver_may_make_every_request_preflight_reviews_for_a_submit(tmp_path):
    """What `submit` asks of the API server (preflight's SelfSubjectAccessReviews), for both
    workloads: the driver's Role grants each namespaced request, its ClusterRoles the rest."""
    driver = manifests("ml", [Subject("User", "ada")], cluster_wide_reads=True, driver=True)
    bound = {
        d["roleRef"]["name"]
        for d in driver
        if d["kind"].endswith("Binding") and d["subjects"][0]["name"] == "stratctl-driver"
    }
    assert bound == {"stratctl-driver", "stratctl:ml", "stratctl:cluster-reads"}
    roles = {d["metadata"]["name"]: d["rules"] for d in driver if d["kind"] in ("Role", "ClusterRole")}
    namespaced, cluster = _granted(roles["stratctl-driver"]), _granted(roles["stratctl:cluster-reads"])
    assert (
        {("list", "scheduling.k8s.io", "priorityclasses"), ("list", "scheduling.volcano.sh", "queues")}
        <= _granted(roles["stratctl:ml"])
        == _granted([r.manifest() for r in namespace_rules("ml")])
    )
    for example in ("demo.yaml", "ab-batch.yaml"):
        study = prepare(REPO / "examples" / example, "ml").study
        for access in accesses(study, services=True):
            granted = namespaced if access.namespace else cluster
            assert (access.verb, access.group, access.resource) in granted, (example, access)


def test_without_driver_none_of_its_objects_is_printed():
    for args in ([], ["--cluster-wide-reads"], ["--service-account", "ci", "--report-service-account", "trainer"]):
        out = CliRunner().invoke(app, ["rbac", "-n", "ml", *args])
        assert out.exit_code == 0, out.output
        docs = [d for d in yaml.safe_load_all(out.output) if d]
        assert {d["kind"] for d in docs} <= {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
        assert "stratctl-driver" not in out.output
        assert "PriorityClass" not in {d["kind"] for d in docs}
