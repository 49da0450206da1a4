"""A small version of bench/adaptive_experiment.py: structural properties that do not
depend on timing noise. Three studies (gangs of 2, 3 and 4 one-GPU pods) run side by side
with adaptive parallelism while a high-priority job takes half the GPUs for a while."""

from __future__ import annotations

import time

import pytest

from bench.adaptive_experiment import Phase, measure

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("workload", ["volcano", "batch"])
def test_adaptive_submission_completes_every_trial_with_few_pending_pods(testbed, workload):
    def schedule(total_gpus: int, horizon: float) -> list[Phase]:
        return [Phase(3, 18, total_gpus // 2)]

    result = measure(
        "ci",
        None,
        testbed,
        trials=30,
        seed=3,
        tag=f"{int(time.time()) % 10000}",
        schedule_factory=schedule,
        duration=(3, 6),
        workload=workload,
    )
    assert result.total == 30
    assert result.succeeded == 30 and result.failed == 0  # every trial completes
    # gangs are admitted only when free GPUs hold them: never more pods waiting than the
    # cluster has GPUs (submit-all would have all 90 pods waiting at once)
    assert result.peak_pending_pods <= result.total_gpus, result
    # pods that waited 2 s (four scheduler periods) are queued, not in transit: the room
    # rule allows two queued gangs per study, 2 × (2 + 3 + 4) = 18 pods. It matters for
    # batch/v1 Jobs, whose pods all exist at once (submit-all would create all 90 at the start)
    assert result.peak_stuck_pods <= 2 * (2 + 3 + 4) + 4, result
    # no gang starves: none of ours waited Pending for long
    assert result.max_pending_age < 45, result
    assert result.throttled_429 == 0
    # production is not starved: the studies yield to the high-priority gang, which gets
    # its GPUs once the trials running when it arrived end (3-6 s each), not after the studies
    assert len(result.production_waits) == 1 and result.production_waits[0] < 6 + 10, result
