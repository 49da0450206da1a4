"""`stratctl rbac` (backends/kubernetes/verbs/rbac.py): the committed manifests are its output, and it prints
what admins apply."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from stratctl.backends.kubernetes.verbs.rbac import Subject, manifests, text
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
        "stratctl rbac -n stratctl-e2e --user trial-runner --cluster-wide-reads",
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
        assert (REPO / path).read_text() == text(namespace, subjects, reads, command=command), (
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
