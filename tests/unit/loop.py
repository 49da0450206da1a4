"""The submit loop on an in-memory cluster, in virtual time: the study and the builder the
loop's unit tests share (the `study_file` fixture is in conftest.py)."""

from __future__ import annotations

from stratctl.backends.kubernetes.loop.controller import Submitter
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.run.options import SubmitOptions
from stratctl.run.throttle import Throttle
from tests.unit.fakes import MaxRng
from tests.unit.rendering import Renderer

STUDY = """\
name: loop
namespace: stratctl-e2e
queue: default
space:
  lr: {type: choice, values: [0.1, 0.01, 0.001, 0.0001, 0.00001]}
  layers: {type: choice, values: [2, 4]}
strategy: {kind: grid}
trial:
  image: busybox
  command: ["train", "--lr={{ params.lr }}", "--layers={{ params.layers }}"]
  resources: {requests: {nvidia.com/gpu: 1}}
  tasks: [{name: worker, replicas: 2}]
throttle: {qps: 100, burst: 10, parallelism: {min: 1, initial: 3, max: 3}}
"""


def make(path, cluster, clock, **options):
    study = load_study(path)
    trials = expand(study)
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())

    def sleep(seconds):
        clock.sleep(seconds)
        cluster.advance()

    opts = SubmitOptions(**{"poll_interval": 1.0, "workers": 1, **options})
    return Submitter(study, trials, Renderer(study), cluster, throttle, opts, clock=clock, sleep=sleep), trials
