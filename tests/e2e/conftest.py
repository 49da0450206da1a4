"""Session fixture for end-to-end tests: a real Kubernetes API server with Volcano and
KWOK fake GPU nodes.

By default the local testbed (testbed/up.sh: etcd, kube-apiserver,
kube-controller-manager, Volcano, KWOK as local processes) is started once per session,
built first if its binaries are not cached, and stopped at the end unless it was already
running or STRATCTL_TESTBED_KEEP=1. A testbed that is already up is reused, except in CI
(CI=true) or with STRATCTL_TESTBED_FRESH=1, where it is restarted from scratch.

With STRATCTL_TEST_KUBECONFIG set, that cluster (kind or any other, with Volcano installed)
is used as is and nothing is started or stopped. Its contexts and namespace default to the
testbed's names and can be overridden with STRATCTL_TEST_ADMIN_CONTEXT,
STRATCTL_TEST_RESTRICTED_CONTEXT and STRATCTL_TEST_NAMESPACE.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stratctl.backends.kubernetes.api.cluster import POD, Cluster
from tests.e2e.support import GPU, Cli, delete_study, of_study, wait_until

REPO = Path(__file__).resolve().parents[2]
TESTBED_DIR = REPO / "testbed"

APF_NAME = "stratctl-trial-runner"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "e2e: end-to-end test against a real Kubernetes + Volcano cluster "
        "(the local testbed or STRATCTL_TEST_KUBECONFIG)",
    )


def _run_dir() -> Path:
    if os.environ.get("STRATCTL_TESTBED_DIR"):
        return Path(os.environ["STRATCTL_TESTBED_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "stratctl" / "testbed-run"


@dataclass
class Testbed:
    """What end-to-end tests get from the ``testbed`` fixture."""

    kubeconfig: str
    admin_context: str = "admin"
    restricted_context: str = "restricted"
    namespace: str = "stratctl-e2e"
    kubectl: str | None = None
    #: True when the fixture runs the local testbed (testbed/*.sh), False for an external cluster.
    local: bool = True
    #: Prometheus scraping the cluster's components (testbed: up.sh starts it; external
    #: cluster: STRATCTL_TEST_PROMETHEUS_URL), else None.
    prometheus_url: str | None = None
    #: Its file-based service discovery directory: a JSON target list written there is
    #: scraped as job "stratctl" (testbed; external: STRATCTL_TEST_PROMETHEUS_TARGETS).
    prometheus_targets: Path | None = None
    _clients: dict = field(default_factory=dict, repr=False)

    def api_client(self, context: str | None = None):
        """A kubernetes.client.ApiClient for a context (default: admin)."""
        from kubernetes import config

        ctx = context or self.admin_context
        if ctx not in self._clients:
            self._clients[ctx] = config.new_client_from_config(config_file=self.kubeconfig, context=ctx)
        return self._clients[ctx]

    def admin(self):
        return self.api_client(self.admin_context)

    def restricted(self):
        return self.api_client(self.restricted_context)

    def apf(self, on: bool) -> None:
        """Turn the APF limit for the restricted user on (one seat, Reject) or off."""
        if self.local:
            subprocess.run(["bash", str(TESTBED_DIR / "apf.sh"), "on" if on else "off"], check=True, env=_testbed_env())
            return
        _apf_external(self, on)


def _testbed_env() -> dict:
    return dict(os.environ)


def _fresh() -> bool:
    """In CI start from a clean testbed even if one is already running (hermetic runs);
    STRATCTL_TESTBED_FRESH=0/1 overrides."""
    if "STRATCTL_TESTBED_FRESH" in os.environ:
        return os.environ["STRATCTL_TESTBED_FRESH"] == "1"
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _apf_external(tb: Testbed, on: bool) -> None:
    """APF switch for an external cluster: same objects as testbed/objects.yaml + apf-flowschema.yaml."""
    import yaml
    from kubernetes import client, utils
    from kubernetes.client.rest import ApiException

    api = client.FlowcontrolApiserverV1Api(tb.admin())
    if on:
        docs = [d for d in yaml.safe_load_all((TESTBED_DIR / "objects.yaml").read_text()) if d]
        plc = [d for d in docs if d["kind"] == "PriorityLevelConfiguration"]
        fs = yaml.safe_load((TESTBED_DIR / "apf-flowschema.yaml").read_text())
        for obj in plc + [fs]:
            try:
                utils.create_from_dict(tb.admin(), obj)
            except utils.FailToCreateError as exc:
                if not all(getattr(e, "status", None) == 409 for e in exc.api_exceptions):
                    raise
    else:
        try:
            api.delete_flow_schema(APF_NAME)
        except ApiException as exc:
            if exc.status != 404:
                raise
    time.sleep(2)


def _testbed_up() -> tuple[str, bool]:
    """Run testbed/up.sh; returns (kubeconfig, started_by_us)."""
    env = _testbed_env()
    env["STRATCTL_TESTBED_FRESH"] = "1" if _fresh() else "0"
    proc = subprocess.run(
        ["bash", str(TESTBED_DIR / "up.sh")],
        capture_output=True,
        text=True,
        env=env,
    )
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        pytest.fail(f"testbed/up.sh failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}", pytrace=False)
    kubeconfig = proc.stdout.strip().splitlines()[-1]
    return kubeconfig, "already up" not in proc.stderr


@pytest.fixture(scope="session")
def testbed():
    external = os.environ.get("STRATCTL_TEST_KUBECONFIG")
    if external:
        yield Testbed(
            kubeconfig=external,
            admin_context=os.environ.get("STRATCTL_TEST_ADMIN_CONTEXT", "admin"),
            restricted_context=os.environ.get("STRATCTL_TEST_RESTRICTED_CONTEXT", "restricted"),
            namespace=os.environ.get("STRATCTL_TEST_NAMESPACE", "stratctl-e2e"),
            kubectl=shutil.which("kubectl"),
            local=False,
            prometheus_url=os.environ.get("STRATCTL_TEST_PROMETHEUS_URL") or None,
            prometheus_targets=Path(os.environ["STRATCTL_TEST_PROMETHEUS_TARGETS"])
            if os.environ.get("STRATCTL_TEST_PROMETHEUS_TARGETS")
            else None,
        )
        return

    kubeconfig, started = _testbed_up()
    bin_dir = (_run_dir() / "bin-dir").read_text().strip()
    kubectl = Path(bin_dir) / "kubectl"
    url_file = _run_dir() / "prometheus-url"
    tb = Testbed(
        kubeconfig=kubeconfig,
        kubectl=str(kubectl) if kubectl.exists() else None,
        prometheus_url=url_file.read_text().strip() if url_file.exists() else None,
        prometheus_targets=_run_dir() / "prometheus" / "targets",
    )
    try:
        yield tb
    finally:
        try:
            tb.apf(False)
        except Exception:  # best effort before teardown
            pass
        if started and os.environ.get("STRATCTL_TESTBED_KEEP") != "1":
            subprocess.run(["bash", str(TESTBED_DIR / "down.sh")], check=False, env=_testbed_env())


@pytest.fixture
def api(testbed):
    """stratctl's own cluster adapter as the admin, for tests to look at and clean up the cluster."""
    from stratctl.backends.kubernetes.api.cluster import Cluster

    cluster = Cluster.connect(testbed.kubeconfig, testbed.admin_context, testbed.namespace)
    yield cluster
    cluster.close()


@pytest.fixture
def cli(testbed):
    """The CLI as separate processes as the admin (tests/e2e/support.py: Cli); a module that
    needs other settings overrides this fixture with its own Cli(testbed, ...)."""
    return Cli(testbed)


@pytest.fixture
def studies(api, tmp_path):
    """`studies(name, text)` writes a study file and returns its path; `studies(name)` only
    names a study the test writes itself. Afterwards every object of those studies is deleted
    (Volcano and batch jobs, PodGroups, pods, records, by the study label) and their pods are
    waited for, so the next test finds the GPUs free."""
    names: list[str] = []

    def write(name: str, text: str | None = None) -> str | None:
        names.append(name)
        if text is None:
            return None
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        return str(path)

    yield write
    for name in names:
        delete_study(api, name)
    for name in names:
        wait_until(lambda name=name: not of_study(api, POD, name), 90, message=f"pods of {name} gone")


REAL_KEY = "testbed.stratctl.io/real"  # the testbed's label and NoSchedule taint on its real node


def runs_processes(node: dict) -> bool:
    """A Ready node whose kubelet is a kubelet: not one KWOK plays (its annotation, its
    "fake" kubelet version, its kwok runtime)."""
    meta, status = node["metadata"], node.get("status") or {}
    if "kwok.x-k8s.io/node" in (meta.get("annotations") or {}):
        return False
    info = status.get("nodeInfo") or {}
    runtime = info.get("containerRuntimeVersion") or ""
    if info.get("kubeletVersion") in ("", "fake", None) or not runtime or runtime.startswith("kwok"):
        return False
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return bool(ready) and ready[0].get("status") == "True"


@pytest.fixture(scope="module")
def real_node(testbed):
    """The name and GPUs of a node that runs real processes (the testbed's real one first)."""
    cluster = Cluster.connect(testbed.kubeconfig, testbed.admin_context, testbed.namespace)
    try:
        nodes, _ = cluster.list(("v1", "Node"))
    finally:
        cluster.close()
    real = sorted(
        (n for n in nodes if runs_processes(n)),
        key=lambda n: ((n["metadata"].get("labels") or {}).get(REAL_KEY) != "true", n["metadata"]["name"]),
    )
    if not real:
        pytest.skip(
            f"no node of the cluster runs real processes (all {len(nodes)} are KWOK's or not Ready); "
            "the local testbed starts one unless STRATCTL_TESTBED_REAL_NODE=0"
        )
    node = real[0]
    gpus = int((node["status"].get("allocatable") or {}).get(GPU, "0") or 0)
    return node["metadata"]["name"], gpus
