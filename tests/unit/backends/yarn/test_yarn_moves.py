"""Queue fallback on YARN through the shared loop, against a fake ResourceManager: an
application whose trial has not started moves to the study's next queue once it has
waited past the pending grace there, and only then; a Slurm study has no such step."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from stratctl.backends.batch.loop import AttemptLoop
from stratctl.backends.batch.moves import QueueMoves
from stratctl.backends.yarn.rest import ResourceManager
from stratctl.backends.yarn.scheduler import YarnScheduler
from stratctl.core.space import expand
from stratctl.run.options import SubmitOptions
from stratctl.run.policy import StaticPolicy
from stratctl.run.progress import Reporter
from stratctl.run.throttle import Throttle
from tests.unit.backends.fakes import FakeRM, yarn_nodes
from tests.unit.fakes import FakeClock, MaxRng, one_cycle
from tests.unit.studies import load

STUDY = """\
name: s
backend: yarn
queue: [prod, research]
yarn: {resource_managers: ["http://rm:8088"], classpath: [/etc/hadoop]}
space:
  seed: {type: int, low: 0, high: 0, grid: true}
strategy: {kind: grid}
trial:
  command: ["train"]
  resources: {limits: {nvidia.com/gpu: 1}}
"""


class Events(Reporter):
    def __init__(self):
        self.said: list[str] = []

    def event(self, message: str) -> None:
        self.said.append(message)


def test_a_waiting_application_moves_to_the_next_queue_past_the_grace(tmp_path):
    study = load(tmp_path, STUDY)
    fake = FakeRM()
    fake.nodes = yarn_nodes([0, 0])  # the cluster full: it waits
    jar = tmp_path / "am.jar"
    jar.write_bytes(b"jar")
    scheduler = YarnScheduler(study, rm=ResourceManager(["http://rm:8088"], pool=fake), workdir=str(tmp_path), jar=jar)
    clock, events = FakeClock(), Events()
    run = AttemptLoop(
        study,
        expand(study),
        scheduler,
        Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng()),
        SubmitOptions(poll_interval=1, workers=1, detach=True),
        reporter=events,
        policy=StaticPolicy(1),
        clock=clock,
        sleep=clock.sleep,
    )
    assert any(isinstance(c, QueueMoves) for c in run.capabilities)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(run, pool)
        [submitted] = fake.submitted
        assert submitted["queue"] == "prod"  # the first of the list
        one_cycle(run, pool)  # seen pending from now on
        clock.now += 5.0
        one_cycle(run, pool)
        assert fake.moved == []  # waited the grace, not past it
        clock.now += 0.5
        one_cycle(run, pool)
        assert fake.moved == [(submitted["application-id"], "research")]
        clock.now += 60.0
        one_cycle(run, pool)
        assert len(fake.moved) == 1 and len(fake.submitted) == 1  # research is the last: it stays; same application
    assert any(m.endswith("moved: queue prod → research, it had waited 6s without starting") for m in events.said)
    assert scheduler.attempts()[expand(study)[0].name].queue == "research"
