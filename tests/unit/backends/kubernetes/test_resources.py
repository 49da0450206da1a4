import pytest

from stratctl.backends.kubernetes.api.resources import resource_path
from stratctl.errors import Invalid


def test_resource_paths():
    assert (
        resource_path("batch.volcano.sh/v1alpha1", "Job", "ns", "t-1")
        == "/apis/batch.volcano.sh/v1alpha1/namespaces/ns/jobs/t-1"
    )
    assert resource_path("v1", "ConfigMap", "ns") == "/api/v1/namespaces/ns/configmaps"
    assert resource_path("v1", "Node", "ignored") == "/api/v1/nodes"
    assert resource_path("v1", "Pod", None) == "/api/v1/pods"
    with pytest.raises(Invalid, match="does not manage"):
        resource_path("apps/v1", "Deployment", "ns")
