"""Trials of different shapes: replicas and GPUs as templates (core/shape.py), what plan
and cost make of them, the packing rule (run/packing.py) and the loop that applies it."""

from __future__ import annotations

import re
import textwrap

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.objects.gpus import pod_gpus
from stratctl.backends.kubernetes.watch.capacity import Capacity
from stratctl.core.plan import as_json
from stratctl.errors import StudyError
from stratctl.run.packing import Candidate, pack, passed_over, place
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import make
from tests.unit.rendering import Renderer, make_plan, validate

MIXED = """\
name: mixed
namespace: stratctl-e2e
space:
  size: {type: choice, values: [1, 2, 4, 8]}
  workers: {type: choice, values: [1, 2]}
strategy: {kind: grid}
trial:
  image: busybox
  resources: {requests: {nvidia.com/gpu: "{{ params.size }}", cpu: 100m}}
  tasks: [{name: worker, replicas: "{{ params.workers }}"}]
cost: {expected_duration: 30m}
"""


def write(tmp_path, text: str, name: str = "study.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def problems(path: str) -> list[str]:
    with pytest.raises(StudyError) as info:
        validate(path)
    return [str(p) for p in info.value.problems]


# ---------------------------------------------------------------- the study file


def test_each_trial_renders_its_own_gang_size_and_gpus(tmp_path):
    study, trials = validate(write(tmp_path, MIXED))
    renderer = Renderer(study)
    seen = set()
    for trial in trials:
        size, workers = trial.params["size"], trial.params["workers"]
        job = renderer.render(trial)[0]
        task = job["spec"]["tasks"][0]
        container = task["template"]["spec"]["containers"][0]
        assert job["spec"]["minAvailable"] == task["replicas"] == task["minAvailable"] == workers
        assert container["resources"]["requests"]["nvidia.com/gpu"] == size
        assert container["resources"]["limits"]["nvidia.com/gpu"] == size
        assert renderer.shape(trial) == (size,) * workers
        seen.add(renderer.shape(trial))
    assert len(seen) == 8 and study.varying_shape


def test_batch_workload_takes_its_parallelism_and_podgroup_from_the_trial(tmp_path):
    study, trials = validate(write(tmp_path, MIXED.replace("strategy:", "workload: batch\nstrategy:")))
    renderer = Renderer(study)
    trial = next(t for t in trials if t.params == {"size": 4, "workers": 2})
    docs = {d["kind"]: d for d in renderer.render(trial)}
    assert docs["Job"]["spec"]["parallelism"] == 2
    assert docs["PodGroup"]["spec"]["minMember"] == 2
    assert docs["PodGroup"]["spec"]["minResources"]["nvidia.com/gpu"] == "8"
    assert pod_gpus(docs["Job"]["spec"]["template"]) == 4


def test_fixed_shapes_render_exactly_as_before(tmp_path):
    fixed = MIXED.replace('"{{ params.size }}"', "2").replace('"{{ params.workers }}"', "3")
    study, trials = validate(write(tmp_path, fixed))
    assert not study.varying_shape
    renderer = Renderer(study)
    assert renderer.shape(trials[0]) == (2, 2, 2)
    assert renderer._compiled is not None  # still rendered once per study


def test_a_replicas_value_that_is_neither_a_number_nor_a_template_is_located(tmp_path):
    path = write(tmp_path, MIXED.replace('replicas: "{{ params.workers }}"', 'replicas: "many"'))
    assert problems(path) == [
        f"{path}:10:36: trial.tasks.0.replicas: must be a whole number, or a template over "
        "the trial's values (e.g. \"{{ params.workers }}\"), got 'many'"
    ]


def test_a_template_naming_an_unknown_parameter_is_refused_before_any_trial(tmp_path):
    path = write(tmp_path, MIXED.replace("params.workers", "params.nodes"))
    assert problems(path) == [
        f"{path}:10:36: trial.tasks.0.replicas: unknown parameter 'params.nodes' (known: size, workers)"
    ]


@pytest.mark.parametrize(
    "values, message",
    [
        ("[1, 0]", "trial.tasks.0.replicas: replicas renders to '0' for trial 1 (mixed-"),
        ('[1, "two"]', "trial.tasks.0.replicas: replicas renders to 'two' for trial 1 (mixed-"),
        ("[1, 2.5]", "trial.tasks.0.replicas: replicas renders to '2.5' for trial 1 (mixed-"),
    ],
)
def test_a_value_a_trial_renders_is_checked_and_located(tmp_path, values, message):
    path = write(tmp_path, MIXED.replace("values: [1, 2]}", f"values: {values}}}"))
    (found,) = problems(path)
    assert found.startswith(f"{path}:10:36: {message}")
    assert found.endswith("expected a whole number from 1 to 10,000")


def test_a_fraction_of_a_gpu_is_refused_for_the_trial_that_renders_it(tmp_path):
    path = write(tmp_path, MIXED.replace("values: [1, 2, 4, 8]", "values: [1, 0.5]"))
    (found,) = problems(path)
    assert found.startswith(
        f"{path}:9:42: trial.resources.requests.nvidia.com/gpu: requests of nvidia.com/gpu "
        "renders to '0.5' for trial 2 (mixed-"
    )


def test_min_available_above_the_replicas_a_trial_renders_is_refused(tmp_path):
    path = write(
        tmp_path,
        MIXED.replace('replicas: "{{ params.workers }}"', 'replicas: "{{ params.workers }}", min_available: 2'),
    )
    (found,) = problems(path)
    assert found.startswith(f"{path}:10:75: trial.tasks.0.min_available: 2 exceeds the 1 replicas of trial 0 (mixed-")


def test_plan_shows_each_trials_pods_and_gpus_and_costs_their_sum(tmp_path):
    plan = make_plan(write(tmp_path, MIXED))
    data = as_json(plan)
    by_params = {(t["params"]["size"], t["params"]["workers"]): t for t in data["trials"]}
    assert by_params[(8, 2)]["gpus"] == 16 and by_params[(8, 2)]["pods"] == 2
    assert by_params[(1, 1)]["gpus"] == 1
    # (1+2+4+8) GPUs × (1+2) workers = 45 GPUs for 30 minutes each
    assert data["estimate"]["gpu_hours"] == 22.5
    assert data["estimate"]["gpus_per_trial"] == 16 and data["estimate"]["gpus_least"] == 1
    assert data["gang_size"] is None


# ---------------------------------------------------------------- packing (pure)


def candidates(*shapes: tuple[int, ...]) -> list[Candidate]:
    return [Candidate(f"t{i}", shape) for i, shape in enumerate(shapes)]


def test_place_is_best_fit_largest_pod_first():
    assert place({"a": 8, "b": 3}, (2,)) == {"a": 8, "b": 1}
    assert place({"a": 8, "b": 3}, (4, 2)) == {"a": 4, "b": 1}
    assert place({"a": 1, "b": 1}, (2,)) is None


def test_fragmented_gpus_take_the_small_trials_and_no_large_one():
    # 6 GPUs free in holes of 1 and 2: no node holds an 8-GPU or a 4-GPU pod
    free = {"a": 1, "b": 1, "c": 2, "d": 2}
    waiting = candidates((8,), (4,), (1,), (2,), (8,), (1,), (1,))
    packing = pack(waiting, free, {}, now=0, aging=300, ahead=2)
    assert packing.fragmented
    # the 2-GPU trial first (largest that fits), then the 1-GPU ones into the holes left
    assert packing.order[: packing.fit] == ["t3", "t2", "t5", "t6"]
    # queued ahead: the largest of the rest first, in study order (the 8-GPU ones before the 4-GPU one),
    # so the next node that frees whole goes to a large trial
    assert packing.order[packing.fit :] == ["t0", "t4"]


def test_a_free_block_goes_to_the_large_trial_and_the_holes_to_the_small_ones():
    free = {"a": 8, "b": 1, "c": 3}
    waiting = candidates((1,), (1,), (8,), (2,), (1,))
    packing = pack(waiting, free, {}, now=0, aging=300, ahead=0)
    assert not packing.fragmented
    assert packing.order == ["t2", "t3", "t0", "t1"] and packing.fit == 4  # 8 on a; 2, 1 on c; 1 on b


def test_gangs_are_placed_whole_or_not_at_all():
    # two pods of 4: only one node holds 4 → the 2×4 gang does not fit, a 1×4 does
    packing = pack(candidates((4, 4), (4,)), {"a": 4, "b": 3}, {}, now=0, aging=300, ahead=0)
    assert packing.order == ["t1"] and packing.fit == 1


def test_a_trial_passed_over_for_the_aging_time_is_reserved_and_holds_the_others_back():
    free = {"a": 3, "b": 2}
    waiting = candidates((8,), (1,), (2,))
    young = pack(waiting, free, {"t0": 100.0}, now=399.0, aging=300, ahead=2)
    assert young.reserved is None and young.order[: young.fit] == ["t2", "t1"]
    old = pack(waiting, free, {"t0": 100.0}, now=400.0, aging=300, ahead=2)
    assert old.reserved == "t0" and old.order == ["t0"] and old.fit == 0


def test_a_reserved_trial_that_fits_goes_first_and_the_others_take_what_is_left():
    waiting = candidates((1,), (4,), (2,), (2,))
    packing = pack(waiting, {"a": 4, "b": 2}, {"t1": 0.0}, now=500, aging=300, ahead=0)
    assert packing.reserved == "t1" and packing.order == ["t1", "t2"] and packing.fit == 2


def test_passed_over_counts_from_the_first_time_a_later_trial_went_ahead():
    waiting = ["t0", "t1", "t2", "t3"]
    passed = passed_over(waiting, {"t2"}, {}, now=10.0)
    assert passed == {"t0": 10.0, "t1": 10.0}
    passed = passed_over(waiting, {"t1", "t3"}, passed, now=20.0)
    assert passed == {"t0": 10.0, "t2": 20.0}  # t0 kept its time; t1 admitted; t2 passed now
    assert passed_over(["t2"], set(), passed, now=30.0) == {"t2": 20.0}  # t0 is no longer waiting


# ---------------------------------------------------------------- the loop


def trial_of(job: str) -> str:
    return re.sub(r"-a\d+$", "", job)


def shape_of(job: dict) -> tuple[int, ...]:
    return tuple(pod_gpus(t["template"]) for t in job["spec"]["tasks"] for _ in range(t["replicas"]))


class Nodes:
    """A small cluster under the fake API server: Pending jobs start when their gang fits
    (best fit), running ones end after `runs` cycles; `held` GPUs are another team's."""

    def __init__(self, cluster: FakeCluster, nodes: dict[str, int], held: dict[str, int], runs: dict[int, int]):
        self.cluster, self.nodes, self.held, self.runs = cluster, nodes, held, runs
        self.placed: dict[str, dict[str, int]] = {}  # job → node → GPUs
        self.age: dict[str, int] = {}
        self.started: dict[str, int] = {}
        self.cycle = 0

    def free(self) -> dict[str, int]:
        free = {n: g - self.held.get(n, 0) for n, g in self.nodes.items()}
        for used in self.placed.values():
            for node, gpus in used.items():
                free[node] -= gpus
        return free

    def advance(self) -> None:
        self.cycle += 1
        for job in self.cluster.jobs():
            name, phase = job["metadata"]["name"], self.cluster.phase(job)
            if phase == "Running":
                self.age[name] = self.age.get(name, 0) + 1
                if self.age[name] >= self.runs[sum(shape_of(job))]:
                    self.cluster.set_phase(job, "Completed")
                    del self.placed[name]
        for job in sorted(self.cluster.jobs(), key=lambda j: j["metadata"]["name"]):
            name = job["metadata"]["name"]
            if self.cluster.phase(job) == "Pending":
                free = self.free()
                after = place(free, shape_of(job))
                if after is not None:
                    self.placed[name] = {n: free[n] - after[n] for n in free if free[n] != after[n]}
                    self.cluster.set_phase(job, "Running")
                    self.started[name] = self.cycle


def run_loop(tmp_path, study_text: str, nodes: Nodes, events: list[str], cycles: int = 400):
    path = write(tmp_path, study_text)
    cluster, clock = nodes.cluster, FakeClock()
    submitter, trials = make(path, cluster, clock)

    class Signals:
        def capacity(self, now=None):
            free = nodes.free()
            return Capacity(sum(free.values()), 0, 0.0, len(free), free_after=free)

        def latency_p90(self):
            return None

        def pod_starts(self):
            return {}

    submitter.signals = Signals()
    submitter.reporter = type("R", (), {"update": lambda self, p: None, "event": lambda self, m: events.append(m)})()
    count = {"n": 0}

    def sleep(seconds):
        clock.sleep(seconds)
        nodes.advance()
        count["n"] += 1
        if count["n"] > cycles:
            raise KeyboardInterrupt

    submitter.sleep = sleep
    return submitter, trials, submitter.run()


SIZES = """\
name: sizes
namespace: stratctl-e2e
space:
  seed: {type: int, low: 0, high: 9}
  size: {type: choice, values: [SIZES]}
strategy: {kind: grid}
trial:
  image: busybox
  resources: {requests: {nvidia.com/gpu: "{{ params.size }}"}}
throttle: {qps: 100, burst: 10, order: listed, aging: AGING, parallelism: {min: 1, initial: 8, max: 32}}
"""


def test_the_loop_creates_no_large_trial_while_only_holes_are_free(tmp_path):
    cluster = FakeCluster()
    # 4 nodes of 8 GPUs, another team holds 6 on each: 2 free per node, never a block of 4
    nodes = Nodes(cluster, {f"n{i}": 8 for i in range(4)}, {f"n{i}": 6 for i in range(4)}, {1: 2, 4: 2})
    events: list[str] = []
    text = SIZES.replace("[SIZES]", "[4, 1]").replace("AGING", "1h")
    submitter, trials, progress = run_loop(tmp_path, text, nodes, events, cycles=60)
    created = {trial_of(c) for c in cluster.creates}
    sizes = {t.name: t.params["size"] for t in trials}
    assert {n for n in created if sizes[n] == 1} == {n for n, s in sizes.items() if s == 1}  # every small one ran
    # the 4-GPU trials: at most the two queued ahead, and those never started
    large = [n for n in created if sizes[n] == 4]
    assert len(large) <= 2
    assert all(nodes.started.get(n) is None for n in large)
    assert progress.interrupted


def test_a_large_trial_passed_over_is_reserved_and_starts(tmp_path):
    cluster = FakeCluster()
    # one node of 8; small trials keep part of it busy: without aging an 8-GPU trial listed
    # after a stream of 1-GPU trials would wait for all of them
    nodes = Nodes(cluster, {"n0": 8}, {}, {1: 3, 8: 2})
    events: list[str] = []
    text = SIZES.replace("[SIZES]", "[1, 8]").replace("AGING", "5s").replace("high: 9", "high: 29")
    submitter, trials, progress = run_loop(tmp_path, text, nodes, events, cycles=400)
    assert progress.succeeded == len(trials) == 60
    sizes = {t.name: t.params["size"] for t in trials}
    large_starts = sorted(nodes.started[n] for n in nodes.started if sizes[trial_of(n)] == 8)
    small_starts = sorted(nodes.started[n] for n in nodes.started if sizes[trial_of(n)] == 1)
    assert len(large_starts) == 30
    # large trials ran interleaved with the small ones, not all after them
    assert large_starts[0] < small_starts[-1]
    assert any("passed over by smaller trials" in e and "admitting it first" in e for e in events)


# ---------------------------------------------------------------- what packing sees


class _Items:
    def __init__(self, items):
        self._items = items

    def items(self):
        return self._items


def _node(name: str, gpus: int) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _pod(node: str | None, gpus: int, study: str | None = None, group: str | None = None) -> dict:
    return {
        "metadata": {
            "namespace": "ns",
            "labels": {labels.STUDY: study} if study else {},
            "annotations": {"scheduling.k8s.io/group-name": group} if group else {},
        },
        "spec": {
            **({"nodeName": node} if node else {}),
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def test_packing_does_not_count_the_studys_own_large_gangs_against_the_holes():
    from stratctl.backends.kubernetes.watch.capacity import ClusterSignals

    # holes of 7 and 6 GPUs; two 8-GPU gangs queued: the study's own (for the next whole node)
    # and another team's
    nodes = [_node("a", 8), _node("b", 8)]
    pods = [_pod("a", 1), _pod("b", 2), _pod(None, 8, "mix", "mix-big"), _pod(None, 8, None, "other-big")]
    signals = ClusterSignals(None, [8], "ns", yield_to_higher=False)
    signals.nodes, signals.pods, signals.groups = _Items(nodes), _Items(pods), _Items([])
    signals._priorities = None
    # another team's waiting gang still counts against the largest hole, as for every study
    assert signals.capacity().free_after == {"a": 0, "b": 0}
    signals.own_study = "mix"
    assert signals.capacity().free_after == {"a": 0, "b": 6}  # the study's own gang takes no hole
    assert signals.capacity().gangs_fit == 0  # the rule for studies of one shape is unchanged


def test_with_a_hard_topology_each_gang_is_packed_inside_one_switch():
    leaves = [frozenset({"a", "b"}), frozenset({"c", "d"})]
    free = {"a": 1, "b": 0, "c": 1, "d": 2}
    # a gang of two 1-GPU pods: not across a and c (two switches); inside c+d it fits
    assert place(free, (1, 1), leaves) == {"a": 1, "b": 0, "c": 0, "d": 1}
    assert place({"a": 1, "b": 0, "c": 1, "d": 0}, (1, 1), leaves) is None
    assert place({"a": 1, "b": 0, "c": 1, "d": 0}, (1, 1)) == {"a": 0, "b": 0, "c": 0, "d": 0}
    # packing: one free GPU per switch holds no 2-pod gang, and says the GPUs are fragmented
    packing = pack(
        candidates((1, 1), (1, 1)), {"a": 1, "b": 0, "c": 1, "d": 0}, {}, now=0, aging=300, ahead=0, domains=leaves
    )
    assert packing.fit == 0 and packing.fragmented
