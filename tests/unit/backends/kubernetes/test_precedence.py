"""Yielding to higher-priority gangs: who outranks the study, and the rule that holds for them."""

from stratctl.backends.kubernetes.objects.precedence import Precedence, higher_priority_waiting, priority_values
from stratctl.run.policy import AdaptiveConfig, Observed, PolicyState, StaticPolicy, decide

CLASSES = [
    {"metadata": {"name": "prod"}, "value": 1000},
    {"metadata": {"name": "research"}, "value": 10},
    {"metadata": {"name": "batch"}, "value": 5, "globalDefault": True},
]
VALUES, DEFAULT = priority_values(CLASSES)


def node(name, gpus):
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(node_name, gpus, priority, group=None, phase="Running"):
    meta = {"name": "p", "namespace": "ns", "annotations": {"scheduling.k8s.io/group-name": group} if group else {}}
    return {
        "metadata": meta,
        "status": {"phase": phase},
        "spec": {
            "nodeName": node_name,
            "priority": priority,
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
    }


def group(name, gpus, cls, phase="Pending"):
    spec = {"minMember": gpus, "minResources": {"nvidia.com/gpu": str(gpus)}}
    if cls:
        spec["priorityClassName"] = cls
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec, "status": {"phase": phase}}


NODES = [node("a", 8), node("b", 8)]


def waiting(groups, pods, own=10):
    return higher_priority_waiting(groups, NODES, pods, own, VALUES, DEFAULT)


def test_priority_values_and_the_global_default():
    assert VALUES == {"prod": 1000, "research": 10, "batch": 5} and DEFAULT == 5


def test_a_higher_priority_gang_blocked_by_lower_priority_pods_is_waited_for():
    pods = [pod("a", 8, 10), pod("b", 6, 10)]  # the study's trials hold 14 of 16 GPUs
    assert waiting([group("prod-0", 12, "prod")], pods) == [Precedence("ns/prod-0", 12, "prod", 1000)]
    assert str(waiting([group("prod-0", 12, "prod")], pods)[0]) == "ns/prod-0 (12 GPUs, prod)"


def test_equal_or_lower_priority_running_or_gpu_less_gangs_are_not():
    pods = [pod("a", 8, 10)]
    assert (
        waiting(
            [
                group("peer", 4, "research"),
                group("low", 4, "batch"),
                group("nameless", 4, None),
                group("done", 4, "prod", phase="Running"),
                group("cpu", 0, "prod"),
            ],
            pods,
        )
        == []
    )


def test_a_gang_that_could_not_fit_even_without_lower_priority_work_is_not_waited_for():
    # larger than the cluster
    assert waiting([group("huge", 32, "prod")], []) == []
    # 10 GPUs held by pods of its own rank leave 6: a 12-GPU gang cannot start whatever the study does
    assert waiting([group("prod-1", 12, "prod")], [pod("a", 8, 1000), pod("b", 2, 1000)]) == []
    # its own pods already bound do not count against it
    assert waiting(
        [group("prod-1", 12, "prod", phase="Inqueue")], [pod("a", 8, 1000, group="prod-1"), pod("b", 4, 10)]
    ) == [Precedence("ns/prod-1", 12, "prod", 1000)]


def test_only_gangs_of_the_study_queue_count_when_it_is_given():
    other = group("prod-2", 4, "prod")
    other["spec"]["queue"] = "serving"
    same = group("prod-3", 4, "prod")  # no queue: Volcano's default
    got = higher_priority_waiting([other, same], NODES, [pod("a", 8, 10)], 10, VALUES, DEFAULT, queue="default")
    assert [w.gang for w in got] == ["ns/prod-3"]
    assert len(higher_priority_waiting([other, same], NODES, [], 10, VALUES, DEFAULT)) == 2
    # a study listing several queues yields to gangs waiting in any of them
    got = higher_priority_waiting([other, same], NODES, [], 10, VALUES, DEFAULT, queue=("default", "serving"))
    assert sorted(w.gang for w in got) == ["ns/prod-2", "ns/prod-3"]


def test_largest_waiting_gang_first():
    got = waiting([group("small", 2, "prod"), group("big", 12, "prod", phase="Inqueue")], [pod("a", 8, 10)])
    assert [w.gang for w in got] == ["ns/big", "ns/small"]


def test_the_policy_holds_while_a_gang_outranks_the_study_and_keeps_its_target():
    config = AdaptiveConfig(min=1, initial=4, max=32)
    state = PolicyState(8)
    o = Observed(in_flight=6, pending=0, waiting=50, gangs_fit=3, free_gpus=6, precedence="ns/prod-0 (12 GPUs, prod)")
    decision, after = decide(o, config, state, 100.0)
    assert (decision.target, decision.hold) == (8, True)
    assert decision.reason == "yielding to higher-priority gang ns/prod-0 (12 GPUs, prod)"
    assert decision.admit(o) == 0 and after == state
    # once it is placed the study admits up to its target again
    decision, _ = decide(Observed(in_flight=6, pending=0, waiting=50, gangs_fit=0, free_gpus=0), config, state, 101.0)
    assert not decision.hold and decision.admit(Observed(in_flight=6, pending=0, waiting=50)) == 2


def test_a_stalled_api_holds_while_yielding_without_cutting_the_target():
    o = Observed(in_flight=8, pending=0, waiting=50, api_stalled=20.0, precedence="ns/prod-0 (12 GPUs, prod)")
    decision, _ = decide(o, AdaptiveConfig(), PolicyState(8), 0.0)
    assert (decision.target, decision.hold) == (8, True)


def test_a_static_cap_yields_too_and_keeps_its_cap():
    o = Observed(in_flight=3, pending=0, waiting=50, precedence="ns/prod-0 (12 GPUs, prod)")
    decision = StaticPolicy(8).decide(o, 0.0)
    assert (decision.target, decision.hold, decision.admit(o)) == (8, True, 0)
    assert StaticPolicy(8).decide(Observed(in_flight=3, pending=0, waiting=50), 0.0).admit(o) == 5


def test_a_yielding_static_cap_backfills_like_adaptive():
    # production can start in 30 s; two gangs fit meanwhile: only trials ending 3 s before it may go
    o = Observed(
        in_flight=3,
        pending=0,
        waiting=50,
        gangs_fit=5,
        precedence="ns/prod-0 (12 GPUs, prod)",
        shadow=30.0,
        backfill_fit=2,
    )
    decision = StaticPolicy(8).decide(o, 0.0)
    assert (decision.hold, decision.backfill, decision.admit(o)) == (False, 27.0, 2)
    assert decision.reason == (
        "yielding to higher-priority gang ns/prod-0 (12 GPUs, prod); it can start in 30s: "
        "backfilling trials expected to end before"
    )
    # no known start (a pod without an expected end): hold
    unknown = Observed(
        in_flight=3, pending=0, waiting=50, gangs_fit=5, precedence="ns/prod-0 (12 GPUs, prod)", backfill_fit=2
    )
    assert StaticPolicy(8).decide(unknown, 0.0).hold


def test_a_yielding_static_cap_keeps_no_reservoir_of_queued_gangs():
    # 24 allowed in flight, 10 there, 5 of them queued and one more gang fits in the free
    # GPUs: queueing 14 more would build the reservoir that takes every GPU that frees
    # around a production gang, so only what fits plus 2 ahead, less those queued, go
    cap = StaticPolicy(24)
    seen = Observed(in_flight=10, pending=1, waiting=50, gangs_fit=1)
    assert cap.decide(seen, 0.0).admit(seen) == 2
    full = Observed(in_flight=10, pending=5, waiting=50, gangs_fit=1)
    assert cap.decide(full, 0.0).admit(full) == 0
    # without the cluster's signals (yielding off) it is the plain cap
    blind = Observed(in_flight=10, pending=5, waiting=50)
    assert cap.decide(blind, 0.0).admit(blind) == 14


def timed(node_name, gpus, priority, started, expected=None):
    p = pod(node_name, gpus, priority)
    p["status"]["startTime"] = started
    if expected is not None:
        p["metadata"]["annotations"]["stratctl.io/expected-seconds"] = str(expected)
    return p


T0 = "2026-12-03T08:00:00+00:00"  # 1796284800 seconds since the epoch
NOW = 1796284800.0 + 4  # 4 s after the pods started


def test_shadow_time_is_when_released_gpus_reach_the_waiting_gang():
    from stratctl.backends.kubernetes.objects.precedence import shadow_time

    prod = Precedence("ns/prod-0", 12, "prod", 1000)
    pods = [timed("a", 8, 10, T0, 20), timed("b", 2, 10, T0, 6), timed("b", 4, 10, T0, 10)]
    # 2 free; the 2-GPU pod ends in 2 s (4 free), the 4-GPU one in 6 s (8), the 8-GPU one in 16 s (16)
    assert shadow_time(NODES, pods, prod, NOW) == 16.0
    assert shadow_time(NODES, pods, Precedence("ns/p", 8, "prod", 1000), NOW) == 6.0
    assert shadow_time(NODES, pods, Precedence("ns/p", 2, "prod", 1000), NOW) == 0.0  # fits already
    # a pod that does not say when it ends makes the moment unknown, if the gang needs its GPUs
    unknown = [timed("a", 8, 10, T0), timed("b", 2, 10, T0, 6), timed("b", 4, 10, T0, 10)]
    assert shadow_time(NODES, unknown, prod, NOW) is None
    assert shadow_time(NODES, unknown, Precedence("ns/p", 8, "prod", 1000), NOW) == 6.0
    # pods of the gang's rank or above never make way for it
    assert shadow_time(NODES, [timed("a", 8, 1000, T0, 5)], Precedence("ns/p", 12, "prod", 1000), NOW) is None


def test_while_yielding_trials_that_end_before_the_shadow_time_are_backfilled():
    config = AdaptiveConfig(min=1, initial=4, max=32, backfill_margin=3)
    o = Observed(
        in_flight=6,
        pending=1,
        waiting=50,
        gangs_fit=0,
        free_gpus=6,
        precedence="ns/prod-0 (12 GPUs, prod)",
        shadow=16.0,
        backfill_fit=3,
    )
    decision, _ = decide(o, config, PolicyState(8), 100.0)
    assert (decision.hold, decision.backfill, decision.room) == (False, 13.0, 3)
    assert decision.reason == (
        "yielding to higher-priority gang ns/prod-0 (12 GPUs, prod); it can start in 16s: "
        "backfilling trials expected to end before"
    )
    assert decision.admit(o) == 2  # the target (8 - 6) bounds it; no queued allowance while yielding
    # no room left before the shadow, or no free GPUs, or an unknown shadow: plain yield
    for shadow, fit in ((2.5, 3), (16.0, 0), (None, 3)):
        d, _ = decide(
            Observed(
                in_flight=6,
                pending=0,
                waiting=50,
                gangs_fit=0,
                free_gpus=6,
                backfill_fit=fit,
                precedence="ns/prod-0 (12 GPUs, prod)",
                shadow=shadow,
            ),
            config,
            PolicyState(8),
            100.0,
        )
        assert d.hold and d.backfill is None


def test_backfill_uses_the_free_gpus_the_waiting_gang_cannot_take_yet():
    from stratctl.backends.kubernetes.objects.precedence import backfill_gangs

    prod = Precedence("ns/prod-0", 12, "prod", 1000)
    # 4 free GPUs on node b; production's 12 pods wait for a node, a queued gang of 2 from
    # another launcher waits too
    pods = [pod("a", 8, 10), pod("b", 4, 10)] + [pod(None, 1, 1000, group="prod-0", phase="Pending")] * 12
    groups = [group("prod-0", 12, "prod", phase="Inqueue"), group("peer", 2, "research")]
    assert backfill_gangs(NODES, pods, groups, [prod], [1, 1]) == 1  # 4 free, the peer's 2 aside: one 2-GPU gang
    assert backfill_gangs(NODES, pods, groups, [], [1, 1]) == 0  # with production's demand counted: none


def test_higher_priority_gangs_that_cannot_start_now_are_blocked():
    from stratctl.backends.kubernetes.objects.precedence import blocked_above

    # production's 12 pods wait for a node; 4 GPUs are free: it cannot start, and neither can a
    # queued 6-GPU gang of its rank whose pods do not exist yet; a 2-GPU one could
    pods = [pod("a", 8, 10), pod("b", 4, 10)] + [pod(None, 1, 1000, group="prod-0", phase="Pending")] * 12
    groups = [
        group("prod-0", 12, "prod", phase="Inqueue"),
        group("prod-1", 6, "prod"),
        group("prod-2", 2, "prod"),
        group("peer", 6, "research"),
    ]
    assert blocked_above(groups, pods, 4, 10, VALUES, DEFAULT) == {("ns", "prod-0"), ("ns", "prod-1")}
    # with 12 free GPUs production's gang starts at the scheduler's next cycle: it is demand
    assert blocked_above(groups, pods, 12, 10, VALUES, DEFAULT) == set()
    # the study's equals are never left out (the peer's 6 GPUs stay demand at 4 free)
    assert blocked_above(groups, pods, 4, 10, VALUES, DEFAULT).isdisjoint({("ns", "peer")})
    # pods whose PodGroup is not visible are ranked by their own priority
    assert blocked_above([], pods, 4, 10, VALUES, DEFAULT) == {("ns", "prod-0")}
    assert blocked_above([], pods, 4, 1000, VALUES, DEFAULT) == set()


class _Items:
    def __init__(self, items):
        self._items = items

    def items(self):
        return self._items


def _signals(pods, groups, yields):
    from stratctl.backends.kubernetes.watch.capacity import ClusterSignals

    signals = ClusterSignals(None, [1, 1], "ns", "research", yield_to_higher=yields)
    signals.nodes, signals.pods, signals.groups = _Items(NODES), _Items(pods), _Items(groups)
    signals._priorities = (VALUES, DEFAULT)
    return signals


def test_a_study_that_does_not_yield_counts_the_gpus_a_blocked_gang_leaves_free():
    # 4 GPUs free on node b, production's 12-GPU gang waits for them (Inqueue, pods pending)
    pods = [pod("a", 8, 10), pod("b", 4, 10)] + [pod(None, 1, 1000, group="prod-0", phase="Pending")] * 12
    groups = [group("prod-0", 12, "prod", phase="Inqueue")]
    yielding = _signals(pods, groups, yields=True).capacity()
    assert (yielding.precedence.gang, yielding.gangs_fit) == ("ns/prod-0", 0)  # held for production
    # not yielding: Volcano places smaller gangs in those 4 GPUs until production can start,
    # so they hold two 2-GPU gangs, as a static cap would fill them
    ignoring = _signals(pods, groups, yields=False).capacity()
    assert (ignoring.precedence, ignoring.free_gpus, ignoring.gangs_fit) == (None, 4, 2)
    # a gang that fits the free GPUs now is placed at the next cycle: its demand counts either way
    small = [pod("a", 8, 10), pod("b", 4, 10)] + [pod(None, 1, 1000, group="prod-3", phase="Pending")] * 2
    assert _signals(small, [group("prod-3", 2, "prod", phase="Inqueue")], yields=False).capacity().free_gpus == 2


def test_a_yielding_study_does_not_hold_gpus_for_a_gang_that_can_never_start():
    # 20 GPUs on a 16-GPU cluster: not waited for, and its pending pods reserve nothing
    pods = [pod("a", 8, 10)] + [pod(None, 1, 1000, group="huge", phase="Pending")] * 20
    capacity = _signals(pods, [group("huge", 20, "prod", phase="Inqueue")], yields=True).capacity()
    assert (capacity.precedence, capacity.free_gpus, capacity.gangs_fit) == (None, 8, 4)
