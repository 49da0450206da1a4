"""Study files for the unit tests of the study core."""

from __future__ import annotations

import textwrap
from pathlib import Path

from stratctl.core.spec import Study, load_study
from stratctl.errors import StudyError

MINIMAL = """\
name: tiny
namespace: ns
space:
  lr: {type: loguniform, low: 1.0e-4, high: 1.0e-1}
  bs: {type: choice, values: [16, 32]}
strategy: {kind: random, seed: 3, trials: 5}
trial:
  image: busybox
  args: ["--lr={{ params.lr }}"]
  tasks:
    - name: worker
      replicas: 2
      resources: {limits: {nvidia.com/gpu: 1}}
"""


def write(tmp_path: Path, text: str, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path: Path, text: str) -> Study:
    return load_study(write(tmp_path, text))


def problems(tmp_path: Path, text: str) -> list[str]:
    """The problems of a study file, as printed, with the tmp path shortened to `study.yaml`."""
    path = write(tmp_path, text)
    try:
        load_study(path)
    except StudyError as e:
        return [str(p).replace(str(path), "study.yaml") for p in e.problems]
    raise AssertionError("the study loaded without problems")
