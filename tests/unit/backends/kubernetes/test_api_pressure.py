"""The submit loop on a small API quota, in virtual time: 429s pace the requests, the GPUs
the trials."""

from __future__ import annotations

from stratctl.backends.kubernetes.watch.capacity import Capacity
from stratctl.errors import Throttled
from stratctl.view.display import progress_table, summary
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock, text
from tests.unit.loop import STUDY, make


class QuotaCluster(FakeCluster):
    """A fake API server behind the loop's throttle whose priority level refuses every
    other write with 429 and the Retry-After APF gives after a storm (32 s)."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.gate = None
        self.writes_at: list[tuple[float, str]] = []  # (time, what) of every accepted write
        self._n = 0

    def _through(self, what, fn):
        def attempt():
            self._n += 1
            if self._n % 2:
                self.metrics.count(what, refused=True)
                raise Throttled(f"{what}: too many requests", retry_after=32)
            self.metrics.count(what)
            self.writes_at.append((self.clock(), what))
            return fn()

        if self.gate is None:  # before the loop's throttle is installed (the study's driver mark)
            return fn()
        return self.gate(attempt, mutating=True)

    def advance(self, finish="Completed"):
        """Trials run for about 8 s of loop sleeps (pending ones start at once)."""
        self.ticks = getattr(self, "ticks", 0) + 1
        for job in self.jobs():
            if self.phase(job) == "Pending":
                self.set_phase(job, "Running")
            elif self.phase(job) == "Running" and self.ticks % 8 == 0:
                self.set_phase(job, finish)

    def create(self, manifest, dry_run=False):
        return self._through(f"create {manifest['kind']}", lambda: super(QuotaCluster, self).create(manifest, dry_run))

    def patch(self, kind, name, patch, namespace=None):
        return self._through(f"patch {kind[1]}", lambda: super(QuotaCluster, self).patch(kind, name, patch, namespace))


class Roomy:
    """The GPUs: room for 8 more gangs, whatever the loop does."""

    def capacity(self, now=None):
        return Capacity(free_gpus=16, gangs_fit=8, fragmentation=0.0, nodes=2)

    def latency_p90(self):
        return None

    def pod_starts(self):
        return {}


def test_a_stream_of_429s_with_free_gpus_leaves_the_target_where_the_gpus_put_it(tmp_path):
    clock = FakeClock()
    cluster = QuotaCluster(clock)
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.replace("initial: 3, max: 3", "initial: 2, max: 8"))
    submitter, trials = make(path, cluster, clock)
    cluster.gate = submitter.throttle.call
    submitter.signals = Roomy()
    seen = []
    submitter.reporter = type(
        "R", (), {"update": lambda self, p: seen.append((p.target, p.api_note)), "event": lambda self, m: None}
    )()
    progress = submitter.run()
    targets = [t for t, _ in seen]
    # every trial once, all succeeded; half of all writes were refused
    assert sorted(cluster.creates) == sorted(t.name for t in trials)
    assert progress.succeeded == 10 and progress.throttled_429 > 10
    # the target only ever rose: 2 → 4 → 8, as the free GPUs said, 429s or not
    assert all(b >= a for a, b in zip(targets, targets[1:])) and max(targets) == 8
    # the user was told the API quota is what limits the study
    notes = [note for _, note in seen if note]
    assert any(note.endswith("the API quota, not the GPUs, is the bottleneck") for note in notes), notes
    # no client-wide silence of 32 s: the storm of refusals cost pauses of at most 4 s each
    assert max(submitter.throttle.stats.waits) <= 4
    # record writes coalesced: while throttled, at most one every 10 s
    record_writes = [t for t, what in cluster.writes_at if what == "patch ConfigMap"]
    assert all(b - a >= 10 for a, b in zip(record_writes, record_writes[1:-1])), record_writes
    # the summary counts requests per kind, 429s included
    assert cluster.metrics.sent["create Job"] == 10 + cluster.metrics.refused["create Job"]
    assert "create Job " in summary(progress) and "× 429)" in summary(progress)


def test_the_panel_says_when_the_api_quota_not_the_gpus_is_the_bottleneck():
    from stratctl.run.pace import Pressure
    from stratctl.run.progress import Progress

    p = Progress(
        study="sweep",
        total=100,
        running=9,
        waiting=60,
        target=16,
        wanted=7,
        api=Pressure(throttled_last_minute=12, qps=3, configured_qps=5, window=1, serial_writes=True, slowing=True),
    )
    out = text(progress_table(p))
    assert (
        "API quota  12 × 429 in the last minute, pacing requests at 3/s (configured 5/s), one request at a time; "
        "GPUs: target 16, in flight 9 — the API quota, not the GPUs, is the bottleneck"
    ) in out
    # the GPUs full: the quota pushes back but is not the bottleneck
    p.running, p.wanted = 16, 0
    assert "is the bottleneck" not in text(progress_table(p))
    # room on the GPUs, but the pace is back at qps: the quota is not what holds the study back
    p.running, p.wanted = 9, 7
    p.api = Pressure(throttled_last_minute=12, qps=5, configured_qps=5, window=1, serial_writes=True)
    assert "API quota  12 × 429" in text(progress_table(p)) and "is the bottleneck" not in text(progress_table(p))
    p.api = Pressure(configured_qps=5, qps=5, window=16)
    assert "API quota" not in text(progress_table(p))


def test_status_shows_the_quota_note_a_running_loop_keeps_fresh_in_the_record():
    from stratctl.backends.kubernetes.objects.record import StudyRecord, parse_record, record_manifest
    from stratctl.backends.kubernetes.objects.summary import build
    from stratctl.view.tables import studies_table

    note = (
        "API quota: 12 × 429 in the last minute, pacing requests at 3/s (configured 5/s), one request at a time; "
        "GPUs: target 16, in flight 9 — the API quota, not the GPUs, is the bottleneck"
    )
    record = StudyRecord(
        study="sweep", spec_hash="x", trials=100, target=16, reason="target 16", api_quota=note, api_quota_at=1000.0
    )
    cm = record_manifest(record, "stratctl-e2e")
    assert parse_record(cm).api_quota == note
    (row,), _ = build(1030.0, [cm], {})
    assert row.api == note
    assert f"sweep: {note}" in text(studies_table([row], 1030.0))
    # a loop that stopped writing it: gone after a minute
    (row,), _ = build(1061.0, [cm], {})
    assert row.api == "" and "API quota" not in text(studies_table([row], 1061.0))
