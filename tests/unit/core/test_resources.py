"""Extended resources (GPUs) cannot be overcommitted: the study gets the limit right up front."""

import pytest

from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.errors import StudyError
from tests.unit.rendering import Renderer

STUDY = """\
name: gpus
space:
  lr: {type: choice, values: [0.1]}
strategy: {kind: grid}
trial:
  image: busybox
  resources:
    requests: {nvidia.com/gpu: 2, cpu: "1"}
RESOURCES_EXTRA
"""


def test_a_gpu_request_gets_the_same_limit_kubernetes_requires(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(STUDY.replace("RESOURCES_EXTRA", ""))
    study = load_study(path)
    job = Renderer(study).render(expand(study)[0])[0]
    resources = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] in (2, "2")
    assert resources["limits"] == {"nvidia.com/gpu": resources["requests"]["nvidia.com/gpu"]}  # cpu stays unlimited


def test_a_gpu_limit_different_from_its_request_is_refused_with_its_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(STUDY.replace("RESOURCES_EXTRA", "    limits: {nvidia.com/gpu: 4}"))
    with pytest.raises(StudyError) as err:
        load_study(path)
    assert str(err.value).startswith(f"{path}:9:")
    assert "nvidia.com/gpu cannot be overcommitted: its limit (4) must equal its request (2)" in str(err.value)
