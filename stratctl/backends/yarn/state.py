"""What state each trial of a study is in on YARN, from the ResourceManager's applications
and the records its attempts leave in the study's output directory (pure, but for the
functions that read and write those files).

An application stratctl submitted carries its tags (backends/yarn/app.py): study, trial, attempt.
While the RM remembers it (`yarn.resourcemanager.max-completed-applications` after its
end), its state is the RM's; stratctl writes each ended attempt's record
(`attempt-N.yarn.json`) when it first sees it ended, so a trial's history outlives the RM's
memory and a long study is never submitted twice.

- ACCEPTED (and before): pending, for the AM's container or a queue limit (the
  scheduler's diagnostics say which); RUNNING with the gang AM's progress below 50%: the
  AM runs and waits for the whole gang (pending, for capacity); from 50%: running.
- FINISHED/SUCCEEDED: succeeded. Ended with the gang AM's `stratctl: preempted:`
  diagnostics (a container preempted or lost): preempted, the next attempt resumes from
  the checkpoint; not a failure. Refused at submission for the queue's application limits:
  neither a failure nor a preemption, the next attempt is due. Anything else ended: failed.
- The result a container sent the gang AM is the diagnostics' last line,
  `stratctl: result {...}` (`result_of`), kept in the record with them; a pruned attempt
  (killed) has none and ends failed, never drained or preempted.
- Killed by `stratctl drain` (its `attempt-N.drained` mark): suspended; after `resume`
  (the mark renamed `attempt-N.resumed`) an earlier attempt that counts as nothing.
- The RM restarting the AM within one attempt (its container preempted) is a restart,
  counted as a preemption, as Slurm's requeues are.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from stratctl.attempt import Attempt
from stratctl.backends.yarn.app import parse_tags
from stratctl.trialstate import TrialState

RESULT_MARK = "stratctl: result "  # the gang AM's last diagnostics line: the result a container sent it
PREEMPTED = "stratctl: preempted"  # the gang AM's diagnostics when a container was preempted or lost
RUNNING_PROGRESS = 50.0  # the gang AM reports 0.5 once all N containers run (the RM shows percent)
ENDED = ("FINISHED", "FAILED", "KILLED")
# the Capacity Scheduler refusing a submission for an application limit (maximum-applications)
REFUSED = re.compile(
    r"cannot accept submission|maximum.?applications|exceeds? (the )?max(imum)? (num|number)", re.IGNORECASE
)
# an accepted application waiting for a limit rather than for resources
LIMITS = re.compile(
    r"AM resource limit|max(imum)?.?parallel.?apps|user.?limit|queue.*limit|not yet activated", re.IGNORECASE
)
EXIT = re.compile(r"exited with code (-?\d+)")


def result_of(diagnostics: Any) -> dict[str, Any] | None:
    """The result in an ended application's diagnostics: the gang AM's last line
    `stratctl: result {...}` (Reports.java), None when there is none or it is no JSON object."""
    text = str(diagnostics or "")
    at = text.rfind(RESULT_MARK)
    if at < 0:
        return None
    try:
        value = json.loads(text[at + len(RESULT_MARK) :].strip())
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def said(diagnostics: Any) -> str:
    """The diagnostics without the result's line: how the application ended, in the AM's or
    the RM's words (a result's own text never reads as a preemption)."""
    text = str(diagnostics or "")
    at = text.rfind(RESULT_MARK)
    return (text[:at] if at >= 0 else text).rstrip()


def outcome(app: dict[str, Any], drained: bool = False) -> str:
    """How an ended application ended: succeeded, failed, preempted, refused, drained."""
    diagnostics = said(app.get("diagnostics"))
    if drained:
        return "drained"
    if app.get("state") == "FINISHED" and app.get("finalStatus") == "SUCCEEDED":
        return "succeeded"
    if PREEMPTED in diagnostics:
        return "preempted"
    if app.get("state") == "FAILED" and REFUSED.search(diagnostics) and not app.get("launchTime"):
        return "refused"
    return "failed"


def _seconds(ms: Any) -> float | None:
    return ms / 1000.0 if isinstance(ms, int | float) and ms > 0 else None


def of_app(app: dict[str, Any], study: str, marks: dict[int, str] | None = None) -> Attempt | None:
    """The attempt an application stands for; None for another study's or not stratctl's.
    `marks`: the trial's drain marks (attempt → `drained` | `resumed`)."""
    tags = parse_tags(app.get("applicationTags"))
    if tags.get("study") != study or "trial" not in tags or not tags.get("n", "").isdigit():
        return None
    trial, number = tags["trial"], int(tags["n"])
    state = str(app.get("state") or "")
    diagnostics = " ".join(said(app.get("diagnostics")).split())
    progress = float(app.get("progress") or 0.0)
    mark = (marks or {}).get(number)
    restarts = int(app.get("numAMContainerPreempted") or 0)
    started = _seconds(app.get("launchTime"))
    common: dict[str, Any] = dict(
        job=str(app.get("id") or ""),
        native_state=state,
        restarts=restarts,
        spec_hash=tags.get("spec", ""),
        # its queue's own name: the RM says `research` at submission, `root.research` once moved
        queue=str(app.get("queue") or "").rsplit(".", 1)[-1],
    )
    if state not in ENDED and not (state == "RUNNING" and progress >= RUNNING_PROGRESS):
        waiting_gang = state == "RUNNING"
        reason = "the gang AM waits for all its containers" if waiting_gang else _why(diagnostics)
        limits = not waiting_gang and bool(LIMITS.search(diagnostics))
        return Attempt(
            trial,
            number,
            TrialState.PENDING,
            reason=reason,
            waits_for_capacity=not limits,
            waits_for_limits=limits,
            **common,
        )
    if state == "RUNNING":
        return Attempt(trial, number, TrialState.RUNNING, started=started, **common)
    return _ended(app, trial, number, state, diagnostics, mark, started, common)


def _ended(
    app: dict[str, Any],
    trial: str,
    number: int,
    state: str,
    diagnostics: str,
    mark: str | None,
    started: float | None,
    common: dict[str, Any],
) -> Attempt:
    """The attempt an ended application stands for: succeeded, preempted, refused (told as
    preempted), failed, or drained by stratctl (`mark`)."""
    # drained (or drained and resumed: its next attempt sent) when the drain's kill ended it;
    # one that ended otherwise before the kill came keeps its own ending
    how = outcome(app, drained=mark is not None and state == "KILLED")
    ended = _seconds(app.get("finishedTime"))
    if how == "drained":
        return Attempt(
            trial,
            number,
            TrialState.SUSPENDED,
            reason=f"drained{' and resumed' if mark == 'resumed' else ''}",
            started=started if ended else None,
            ended=ended,
            **common,
        )  # its run until the drain
    state_of = {
        "succeeded": TrialState.SUCCEEDED,
        "preempted": TrialState.PREEMPTED,
        "refused": TrialState.PREEMPTED,
        "failed": TrialState.FAILED,
    }[how]
    code = EXIT.search(diagnostics)
    ran = started is not None and how != "refused"
    return Attempt(
        trial,
        number,
        state_of,
        reason=diagnostics[:300] if how != "succeeded" else "",
        exit_code=int(code.group(1)) if code else None,
        started=started if ran else None,
        ended=ended if ran else None,
        **common,
    )


def _why(diagnostics: str) -> str:
    """A pending application's reason, the scheduler's words without the timestamp prefix."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", diagnostics)
    return text[:200]


def record_of(app: dict[str, Any]) -> dict[str, Any]:
    """What stays of an ended application once the RM forgets it."""
    keep = (
        "id",
        "state",
        "finalStatus",
        "diagnostics",
        "applicationTags",
        "launchTime",
        "finishedTime",
        "numAMContainerPreempted",
        "progress",
    )
    return {k: app.get(k) for k in keep}


def latest(
    apps: list[dict[str, Any]],
    study: str,
    records: dict[str, dict[int, dict[str, Any]]],
    marks: dict[str, dict[int, str]],
) -> dict[str, Attempt]:
    """Each trial's latest attempt, with what its earlier attempts were (failures,
    preemptions, run time), from the RM's applications and the ended attempts' records.
    Of two applications of one attempt (a submission sent again, where the lookup missed
    it), the first one counts."""
    history: dict[str, dict[int, Attempt]] = {}
    for trial, ended in records.items():
        for app in ended.values():
            found = of_app(app, study, marks.get(trial))
            if found is not None:
                history.setdefault(found.trial, {})[found.attempt] = found
    for app in sorted(apps, key=lambda a: str(a.get("id") or ""), reverse=True):  # the first one wins
        found = of_app(app, study, marks.get(_trial_of(app) or ""))
        if found is not None:
            history.setdefault(found.trial, {})[found.attempt] = found
    seen = {}
    for trial, attempts in history.items():
        number = max(attempts)
        last = attempts[number]
        earlier = [attempts[n] for n in range(number) if n in attempts]
        failures = sum(1 for a in earlier if a.state is TrialState.FAILED)
        preempted = sum(
            1 for a in earlier if a.state is TrialState.PREEMPTED and a.exit_code is None and not _refused(a)
        ) + sum(a.restarts for a in earlier)
        ran = sum(a.run_seconds(a.ended or 0.0) for a in earlier if a.ended is not None)
        seen[trial] = replace(
            last,
            failures_before=failures + (number - len(earlier)),  # unknown ones: failures
            preempted_before=preempted,
            earlier_seconds=ran,
        )
    return seen


def _refused(attempt: Attempt) -> bool:
    return bool(REFUSED.search(attempt.reason)) and attempt.started is None


def _trial_of(app: dict[str, Any]) -> str | None:
    return parse_tags(app.get("applicationTags")).get("trial")


# -- the files ----------------------------------------------------------------------------


def read_records(directory: Path) -> tuple[dict[str, dict[int, dict[str, Any]]], dict[str, dict[int, str]]]:
    """The ended attempts' records and the drain marks under a study's output directory."""
    records: dict[str, dict[int, dict[str, Any]]] = {}
    marks: dict[str, dict[int, str]] = {}
    if not directory.is_dir():
        return records, marks
    for trial_dir in directory.iterdir():
        if not trial_dir.is_dir():
            continue
        for path in trial_dir.iterdir():
            name = path.name
            if not name.startswith("attempt-"):
                continue
            number, _, kind = name[len("attempt-") :].partition(".")
            if not number.isdigit():
                continue
            if kind == "yarn.json":
                try:
                    records.setdefault(trial_dir.name, {})[int(number)] = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
            elif kind in ("drained", "resumed"):
                mark = marks.setdefault(trial_dir.name, {})
                if mark.get(int(number)) != "drained":  # a drained mark beside a resumed one: drained again
                    mark[int(number)] = kind
    return records, marks


def write_record(directory: Path, trial: str, attempt: int, app: dict[str, Any]) -> None:
    path = directory / trial / f"attempt-{attempt}.yarn.json"
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record_of(app)))
    tmp.replace(path)


def trial_records(directory: Path, trial: str) -> dict[int, dict[str, Any]]:
    """One trial's ended attempts' records (attempt → record), from its directory alone."""
    out = {}
    for path in (directory / trial).glob("attempt-*.yarn.json"):
        number = path.name[len("attempt-") : -len(".yarn.json")]
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if number.isdigit() and isinstance(record, dict):
            out[int(number)] = record
    return out
