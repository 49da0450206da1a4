"""Static kubeconfig credentials go over urllib3 alone (backends/kubernetes/api/credentials.py,
backends/kubernetes/api/transport.py): what an API server sees from them, that the Kubernetes
client is not loaded for them, and that plugins still go the client's way."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, Cluster
from stratctl.backends.kubernetes.api.credentials import Unsupported, static_credentials
from stratctl.backends.kubernetes.api.kubeconfig import UnknownContext
from stratctl.backends.kubernetes.api.quickread import study_names
from stratctl.errors import Unavailable


@pytest.fixture
def api():
    """A tiny API server: records each request (method, path, headers by lower-case name, JSON body) and answers
    201 with the body for a POST, 200 with {"kind": "ConfigMap"} otherwise."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, doc: dict) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            seen.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body,
                }
            )
            payload = json.dumps(body if body is not None else doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_POST(self):
            self._answer(201, {})

        def do_GET(self):
            self._answer(200, {"kind": "ConfigMap", "metadata": {"name": "x"}})

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    httpd.seen = seen
    yield httpd
    httpd.shutdown()


def kubeconfig(tmp_path, server: str, user: str = "{token: s3cret}", cluster_extra: str = "") -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        clusters: [{{name: c, cluster: {{server: "{server}"{cluster_extra}}}}}]
        users: [{{name: u, user: {user}}}]
        contexts:
        - {{name: lab, context: {{cluster: c, user: u, namespace: ml}}}}
        - {{name: other, context: {{cluster: c, user: u}}}}
        current-context: lab
        """)
    )
    return str(path)


def test_a_token_goes_over_urllib3_alone_without_loading_the_kubernetes_client(tmp_path, api):
    path = kubeconfig(tmp_path, f"http://127.0.0.1:{api.server_port}")
    code = textwrap.dedent(f"""\
        import sys
        from stratctl.backends.kubernetes.api.cluster import Cluster
        cluster = Cluster.connect({path!r})
        made = cluster.create(
            {{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "x"}}, "data": {{"a": "1"}}}}
        )
        print(cluster.namespace, made["data"]["a"], "kubernetes" in sys.modules)
        """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ml", "1", "False"]  # the context's namespace; the client never loaded
    (post,) = api.seen
    assert post["method"] == "POST" and post["path"] == "/api/v1/namespaces/ml/configmaps?fieldManager=stratctl"
    assert post["headers"]["authorization"] == "Bearer s3cret"
    assert post["headers"]["content-type"] == "application/json"
    assert post["headers"]["user-agent"].startswith("stratctl/")
    assert post["body"] == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "1"}}


def test_bodies_are_written_as_json_writes_them(tmp_path, api):
    cluster = Cluster.connect(kubeconfig(tmp_path, f"http://127.0.0.1:{api.server_port}"))
    cluster.request(
        "POST",
        "/api/v1/namespaces/ml/configmaps",
        body={"metadata": {"name": "x"}, "data": {8080: "port"}, "big": 2**70, "ratio": 0.5},
    )
    assert api.seen[0]["body"] == {"metadata": {"name": "x"}, "data": {"8080": "port"}, "big": 2**70, "ratio": 0.5}
    cluster.close()


def test_a_token_file_is_read_relative_to_the_kubeconfig_and_a_context_chosen_by_name(tmp_path, api):
    (tmp_path / "token").write_text("from-file\n")
    path = kubeconfig(tmp_path, f"http://127.0.0.1:{api.server_port}", user="{tokenFile: token}")
    cluster = Cluster.connect(path, context="other")
    try:
        assert cluster.namespace == "default"
        cluster.get(CONFIGMAP, "x")
    finally:
        cluster.close()
    assert api.seen[-1]["headers"]["authorization"] == "Bearer from-file"
    assert api.seen[-1]["path"] == "/api/v1/namespaces/default/configmaps/x"


def test_an_exec_plugin_goes_through_the_kubernetes_client(tmp_path, api):
    from kubernetes.client import ApiClient

    credential = json.dumps(
        {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "kind": "ExecCredential",
            "status": {"token": "from-plugin"},
        }
    )
    plugin = tmp_path / "plugin.py"
    plugin.write_text(f"print({credential!r})\n")
    user = (
        f"{{exec: {{apiVersion: client.authentication.k8s.io/v1beta1, command: {sys.executable}, "
        f"args: [{plugin}], interactiveMode: Never}}}}"
    )
    path = kubeconfig(tmp_path, f"http://127.0.0.1:{api.server_port}", user=user)
    with pytest.raises(Unsupported):
        static_credentials(path, None)
    cluster = Cluster.connect(path)
    try:
        assert isinstance(cluster.api, ApiClient)
        cluster.get(CONFIGMAP, "x")
    finally:
        cluster.close()
    assert api.seen[-1]["headers"]["authorization"] == "Bearer from-plugin"


@pytest.mark.parametrize(
    "user, extra",
    [
        ("{exec: {command: get-token}}", ""),
        ("{auth-provider: {name: oidc}}", ""),
        ("{username: a, password: b}", ""),
        ("{token: t}", ", proxy-url: 'http://proxy:3128'"),
        ("{token: t}", ", tls-server-name: api.internal"),
    ],
)
def test_what_needs_more_than_a_token_or_a_certificate_is_left_to_the_client(tmp_path, user, extra):
    with pytest.raises(Unsupported):
        static_credentials(kubeconfig(tmp_path, "https://127.0.0.1:6443", user, extra), None)


def test_an_unreadable_file_is_left_to_the_client_which_says_what_is_wrong(tmp_path):
    with pytest.raises(Unsupported):
        static_credentials(str(tmp_path / "missing"), None)


def test_a_misspelt_context_names_the_contexts_there_are_and_the_nearest(tmp_path):
    path = kubeconfig(tmp_path, "https://127.0.0.1:6443")
    with pytest.raises(UnknownContext) as caught:
        static_credentials(path, "otehr")
    assert str(caught.value) == (
        f"no context 'otehr' in the kubeconfig {path} (--context) (did you mean 'other'?); its contexts: lab, other"
    )
    assert caught.value.exit_code == 2  # a usage error, as validate's
    with pytest.raises(UnknownContext) as far:
        static_credentials(path, "production")
    assert str(far.value).endswith("(--context); its contexts: lab, other")  # nothing near: no guess


@pytest.mark.parametrize("user", ["{token: t}", "{exec: {command: get-token}}"])
def test_connecting_with_an_unknown_context_says_so_whichever_way_the_credentials_go(tmp_path, user):
    """Not the client's "Invalid kube-config file. Expected object with name ...", which
    calls a valid file invalid: the same line for a token and for an exec plugin."""
    path = kubeconfig(tmp_path, "https://127.0.0.1:6443", user)
    with pytest.raises(UnknownContext, match=r"no context 'lba' .*did you mean 'lab'\?\); its contexts: lab, other"):
        Cluster.connect(path, context="lba")


def test_a_current_context_missing_or_gone_is_said_with_the_contexts(tmp_path):
    path = kubeconfig(tmp_path, "https://127.0.0.1:6443")
    text = open(path).read()
    open(path, "w").write(text.replace("current-context: lab", "current-context: labb"))
    with pytest.raises(UnknownContext) as gone:
        static_credentials(path, None)
    assert "current context 'labb'" in str(gone.value) and "did you mean 'lab'?" in str(gone.value)
    open(path, "w").write(text.replace("current-context: lab", ""))
    with pytest.raises(UnknownContext) as unset:
        static_credentials(path, None)
    assert str(unset.value) == (
        f"the kubeconfig {path} sets no current context: choose one with --context; its contexts: lab, other"
    )
    assert study_names(path, "nowhere", None, 1.0) == []  # a Tab offers nothing, and fails not


def test_tls_follows_the_kubeconfig(tmp_path):
    insecure = static_credentials(
        kubeconfig(tmp_path, "https://127.0.0.1:6443", "{token: t}", ", insecure-skip-tls-verify: true"), None
    )
    assert insecure.tls.verify_mode == ssl.CERT_NONE and not insecure.tls.check_hostname
    checked = static_credentials(kubeconfig(tmp_path, "https://127.0.0.1:6443/"), None)
    assert checked.tls.verify_mode == ssl.CERT_REQUIRED and checked.server == "https://127.0.0.1:6443"
    assert static_credentials(kubeconfig(tmp_path, "http://127.0.0.1:8080"), None).tls is None


def test_a_cluster_ca_is_the_only_one_trusted_and_the_systems_are_for_a_cluster_naming_none(tmp_path):
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=test-ca",
            "-keyout",
            str(tmp_path / "ca.key"),
            "-out",
            str(tmp_path / "ca.crt"),
        ],
        check=True,
        capture_output=True,
    )
    own = static_credentials(
        kubeconfig(tmp_path, "https://127.0.0.1:6443", "{token: t}", f", certificate-authority: {tmp_path / 'ca.crt'}"),
        None,
    )
    assert [dict(c["subject"][0])["commonName"] for c in own.tls.get_ca_certs()] == ["test-ca"]
    assert own.tls.verify_mode == ssl.CERT_REQUIRED and own.tls.check_hostname
    system = ssl.create_default_context().cert_store_stats()["x509_ca"]
    assert (
        static_credentials(kubeconfig(tmp_path, "https://127.0.0.1:6443"), None).tls.cert_store_stats()["x509_ca"]
        == system
    )


def test_a_server_that_refuses_is_unavailable_naming_what_happened(tmp_path):
    cluster = Cluster.connect(kubeconfig(tmp_path, "http://127.0.0.1:1"))
    try:
        with pytest.raises(Unavailable, match="cannot reach the API server at http://127.0.0.1:1: .*refused"):
            cluster.get(CONFIGMAP, "x")
    finally:
        cluster.close()
