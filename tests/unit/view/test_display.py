import io

from rich.console import Console

from stratctl.run.progress import Progress
from stratctl.view.display import LogDisplay, progress_table, summary


def text_of(renderable) -> str:
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def sample():
    return Progress(
        study="sweep",
        total=40,
        created=12,
        existing=3,
        pending=2,
        running=5,
        succeeded=7,
        failed=1,
        waiting=25,
        target=8,
        reason="2 more gang(s) fit in free GPUs: target 6 → 8",
        throttled_429=4,
        throttle_waits=9,
        throttle_wait_seconds=3.5,
        api_requests=60,
        api_writes=16,
        free_gpus=10,
        gangs_fit=2,
        fragmentation=0.2,
        latency_p90=0.031,
    )


def test_live_panel_shows_what_the_loop_is_doing():
    out = text_of(progress_table(sample()))
    assert "8/40 finished (7 succeeded, 1 failed)" in out
    assert "7 of target 8 (5 running, 2 pending gangs), 25 waiting" in out
    assert "2 more gang(s) fit in free GPUs: target 6 → 8" in out
    assert "10 free GPUs, room for 2 more gangs, 20% fragmented, API p90 31ms" in out
    assert "4 × HTTP 429" in out


def test_live_panel_shows_the_etcd_breaker_only_while_it_moves_or_holds():
    assert "etcd breaker" not in text_of(progress_table(sample()))
    p = sample()
    p.breaker = "tripped 12s ago (etcd p99 90ms); resumes after 30s below 200ms (4s so far)"
    assert "etcd breaker  tripped 12s ago (etcd p99 90ms); resumes after 30s below 200ms" in text_of(progress_table(p))


def test_log_lines_only_when_counts_change():
    stream = io.StringIO()
    log = LogDisplay(stream, clock=lambda: 0)
    p = sample()
    log.update(p)
    log.update(p)
    p.succeeded += 1
    log.update(p)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith(
        "sweep: 8/40 finished (1 failed), 7/8 in flight (2 pending), 25 waiting, 12 created, 4 x 429"
    )


def test_summary_lists_refused_trials_with_the_servers_message():
    p = sample()
    p.errors = {"sweep-abc": "create Job stratctl-e2e/sweep-abc: spec.queue: Invalid value"}
    out = summary(p)
    assert "7 succeeded, 1 failed, 7 in flight, 25 not yet submitted, of 40 trials" in out
    assert "sweep-abc: create Job stratctl-e2e/sweep-abc: spec.queue: Invalid value" in out
    assert "16 API writes (1.33 per created trial)" in out


def test_the_panel_and_summary_say_one_thing_in_the_singular():
    from stratctl.view.display import progress_table, summary

    p = Progress(study="one", total=1, created=1, running=1, target=1, free_gpus=1, gangs_fit=1, fragmentation=0.0)
    out = text_of(progress_table(p))
    assert "1 free GPU, room for 1 more gang," in out
    assert summary(p).splitlines()[0].endswith("of 1 trial")


def test_live_events_carry_a_time_and_no_source_location():
    from io import StringIO

    from rich.console import Console

    from stratctl.view.display import LiveDisplay

    out = StringIO()
    LiveDisplay(Console(file=out, width=120, force_terminal=False)).event("trial t-3 preempted: resumes as attempt 1")
    line = out.getvalue().rstrip("\n")
    assert line.endswith("trial t-3 preempted: resumes as attempt 1")
    assert line.startswith("[") and "display.py" not in line and ".py:" not in line


def test_the_summary_fits_a_terminal_between_words_and_stays_one_line_per_item_into_a_pipe():
    p = sample()
    p.api_checks = 17
    p.api_sent = {"create Job": 12, "SelfSubjectAccessReview": 17, "get ConfigMap": 30, "list Job": 5}
    p.errors = {"sweep-abc": 'create Job stratctl-e2e/sweep-abc: spec.queue: Invalid value: "missing": no such queue'}
    piped = summary(p)
    assert len(piped.splitlines()) == 4  # one line per item, for grep
    wrapped = summary(p, width=80)
    assert all(len(line) <= 80 for line in wrapped.splitlines()), wrapped
    words = lambda text: text.split()  # noqa: E731 - the same words, only the line breaks differ
    assert words(wrapped) == words(piped)
    assert "SelfSubjectAccessReview" in words(wrapped) and "trials" in words(wrapped)  # no word cut in two
    # an item's continuation lines are indented under it
    error_lines = wrapped.split("  sweep-abc:")[1].splitlines()
    assert len(error_lines) > 1 and all(line.startswith("    ") for line in error_lines[1:])


def test_access_reviews_are_checks_not_writes():
    p = sample()
    p.api_checks = 17
    out = summary(p)
    assert "16 API writes (1.33 per created trial), 17 access checks, 4 HTTP 429 received" in out


def test_a_rerun_that_created_nothing_gives_no_ratio_per_created_trial():
    """`4 API writes (4.00 per created trial)` with 0 created said nothing true."""
    p = sample()
    p.created, p.existing, p.api_writes = 0, 40, 4
    p.api_sent = {"patch ConfigMap": 4}
    lines = summary(p).splitlines()
    assert "created 0, already there 40; 4 API writes, 4 HTTP 429 received" in lines[1]
    assert "per created trial" not in summary(p)
    p.existing = 0  # nothing there either: no ratio per trial for the requests by kind
    assert "requests by kind: " in summary(p) and "per trial" not in summary(p)
    p.api_writes = 1
    assert "already there 0; 1 API write, " in summary(p)
