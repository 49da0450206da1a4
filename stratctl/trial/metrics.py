"""What a trial tells stratctl about its outcome: its result once (`result`), and
intermediate values while it runs for the study's pruner (`report`).

Each backend reads them where it already looks:

- Kubernetes: the result is the container's termination message (`/dev/termination-log`,
  at most 4 KiB), which `stratctl status` and the closed loop read from the finished pod;
  reports are lines of the container's own output (`stratctl.report {"step":3,...}`), which
  the submit loop reads through the API server's pods/log
  (stratctl/backends/kubernetes/search/reportlog.py). The pod needs nothing for it: no
  Kubernetes client, no service account token, no route to the API server.
- Slurm: the result is `result.json` in the trial's output directory (`STRATCTL_OUTPUT_DIR`,
  in the study's directory on the cluster's shared filesystem), which the scheduler reads
  once the attempt ended; reports are lines appended to `report.jsonl` beside it, which the
  submit loop's pruner reads (backends/slurm/scheduler.py: `reports`).
- YARN: no shared filesystem is assumed, so both travel through YARN itself. The gang AM
  gives each container `STRATCTL_REPORT_URL`, its own small HTTP server (yarn-am/Reports.java):
  a report is POSTed there (and appended to `report.jsonl` in the trial's output directory,
  for the user), which the submit loop reads through the ResourceManager's web proxy while
  the application runs; the result is POSTed there too (and written to `result.json`), and
  the AM puts it in its final diagnostics, which the loop reads from the ResourceManager
  (backends/yarn/scheduler.py). A post that fails is said once on stderr, never raised.
- By hand (no trial): both are said on stderr, nothing is written.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stratctl import labels, rendezvous
from stratctl.attempt import RESULT
from stratctl.trial import checkpoint
from stratctl.trial.contract import OUTPUT_DIR, backend

REPORT_URL = "STRATCTL_REPORT_URL"  # YARN: where the gang AM takes reports and the result (ends with /)
POST_TIMEOUT = 3.0  # seconds for one post to the AM: a training step must not wait longer
RESULT_TRIES = 3  # the result is posted once: a failed post is tried again, a second apart
TERMINATION_LOG = "/dev/termination-log"  # the container's terminationMessagePath in stratctl's templates
TERMINATION_LIMIT = 4096  # bytes of a termination message the kubelet keeps; a longer one is cut, unreadable
REPORT_FILE = "report.jsonl"
REPORT_MARK = "stratctl.report "  # a report line of a container's output: the mark, then JSON
_said: set[str] = set()


def result(**metrics: Any) -> Path | None:
    """Write the trial's result, `result(loss=0.231, accuracy=0.91)`, where its backend
    reads it; the path written (None by hand). Values are JSON: numbers (numpy and torch
    scalars too), strings, lists, objects; the study's objective must be a number. Call it
    once, at the end, from rank 0 (another rank's result may be the one read)."""
    if not metrics:
        raise ValueError("result() needs at least one metric, e.g. result(loss=0.23)")
    text = json.dumps(metrics, default=_plain, separators=(",", ":"))
    env = os.environ
    where = backend(env)
    if where in ("slurm", "yarn"):
        path = Path(checkpoint.START, env[OUTPUT_DIR], RESULT)
        path.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.atomic_write(path, lambda f: f.write(text.encode()))  # the loop may read it at any moment
        if where == "yarn":  # to the gang AM, which hands it to the ResourceManager: no shared filesystem
            _post_result(env, text)
        return path
    if where == "kubernetes":
        data = text.encode()
        if len(data) > TERMINATION_LIMIT:
            raise ValueError(
                f"the result is {len(data)} bytes of JSON; a termination message keeps "
                f"{TERMINATION_LIMIT}: report fewer or shorter values"
            )
        with open(TERMINATION_LOG, "wb") as f:  # the kubelet's own mount: written in place, never renamed over
            f.write(data)
        return Path(TERMINATION_LOG)
    print(f"stratctl.trial: result (not in a trial, written nowhere): {text}", file=sys.stderr)
    return None


def report(step: int, flush: bool = False, **values: float) -> bool:
    """Report intermediate values of `step`, `report(3, loss=0.41)`, for the study's pruner;
    True when they reached it now. It never stops the training that calls it.

    On Kubernetes it is one line on stdout, `stratctl.report {"step":3,"values":{"loss":0.41}}`,
    which the submit loop reads from the container's log (every few seconds; `flush` is
    kept for scripts that pass it). On Slurm the values are appended to `report.jsonl` in the
    trial's output directory, which the submit loop reads. On YARN they are posted to the
    gang AM (`STRATCTL_REPORT_URL`), which the loop reads through the ResourceManager, and
    appended to `report.jsonl` for the user; False when the post failed (said once)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a whole number of 0 or more (got {step!r})")
    if not values:
        raise ValueError("report() needs at least one value, e.g. report(3, loss=0.41)")
    numbers = _finite(step, {name: _number(name, value) for name, value in values.items()})
    if not numbers:
        return False
    env = os.environ
    where = backend(env)
    if where == "kubernetes":
        # one write of one whole line, flushed: the log never holds half a report
        sys.stdout.write(report_line(step, numbers))
        sys.stdout.flush()
        return True
    if where == "slurm":  # the submit loop reads the file, on the cluster's shared filesystem
        _append(env, report_record(env, step, numbers))
        return True
    if where == "yarn":
        line = report_record(env, step, numbers)
        _append(env, line)
        return _post(env, "report", {"step": step, "rank": _rank(env)}, line.rstrip("\n"))
    _once("local", "stratctl.trial.report: not in a trial; values not sent")
    return False


def report_line(step: int, values: Mapping[str, float]) -> str:
    """The line of a container's output that reports `values` at `step`."""
    return REPORT_MARK + json.dumps({"step": step, "values": dict(values)}, separators=(",", ":")) + "\n"


def parse_report_line(line: str) -> tuple[int, dict[str, float]] | None:
    """(step, values) of a report line (`report_line`), None for any other line: a line that
    only looks like one (bad JSON, a negative step, a value that is not a finite number) is
    the program's own output, never an error."""
    if not line.startswith(REPORT_MARK):
        return None
    try:
        data = json.loads(line[len(REPORT_MARK) :])
    except ValueError:
        return None
    return _step_values(data) if isinstance(data, dict) else None


def _step_values(data: Mapping[str, Any]) -> tuple[int, dict[str, float]] | None:
    """(step, its finite numeric values) of a parsed report; None when it is not one."""
    step, values = data.get("step"), data.get("values")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0 or not isinstance(values, dict):
        return None
    numbers = {
        str(k): float(v)
        for k, v in values.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
    return (step, numbers) if numbers else None


def _finite(step: int, numbers: dict[str, float]) -> dict[str, float]:
    """The finite values of `numbers`; the others are left out, and stderr says so once (a
    diverging run: not a reason to stop it here)."""
    if all(math.isfinite(v) for v in numbers.values()):
        return numbers
    _once(
        "not finite",
        f"stratctl.trial.report: step {step}: values that are not finite numbers are left "
        f"out ({', '.join(k for k, v in numbers.items() if not math.isfinite(v))})",
    )
    return {k: v for k, v in numbers.items() if math.isfinite(v)}


def report_record(env: Mapping[str, str], step: int, numbers: Mapping[str, float]) -> str:
    """One report as a line of `report.jsonl` (Slurm, YARN; on YARN also what the AM keeps)."""
    record = {"attempt": _whole(env.get(labels.ENV_ATTEMPT)), "rank": _rank(env), "step": step, "values": numbers}
    return json.dumps(record, separators=(",", ":")) + "\n"


def parse_report_record(line: str) -> tuple[int, int | None, dict[str, float]] | None:
    """(step, rank, values) of a `report_record` line; None for anything else (a torn or
    foreign line is skipped, never an error)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    found, rank = _step_values(data), data.get("rank")
    if found is None:
        return None
    return found[0], rank if isinstance(rank, int) and not isinstance(rank, bool) else None, found[1]


def _post(env: Mapping[str, str], what: str, query: Mapping[str, Any], body: str, quiet: bool = False) -> bool:
    """POST `body` (JSON) to the gang AM's `what` (YARN); whether it took it. A failure is
    said once on stderr (unless `quiet`: a try to be repeated), never raised: the training
    goes on."""
    import urllib.error  # only on YARN: the library loads nothing more elsewhere
    import urllib.parse
    import urllib.request

    base = env.get(REPORT_URL)
    if not base:
        _once(
            "no report url",
            f"stratctl.trial: {REPORT_URL} is not set (a gang AM older than this library?): "
            f"{what} kept in the trial's output directory only",
        )
        return False
    url = (
        base.rstrip("/") + "/" + what + "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
    )
    request = urllib.request.Request(
        url, data=body.encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the AM is in the cluster: no HTTP proxy
    try:
        with opener.open(request, timeout=POST_TIMEOUT) as answer:
            return bool(200 <= answer.status < 300)
    except (OSError, ValueError) as exc:  # URLError, HTTPError, timeouts and resets are OSErrors
        if not quiet:
            why = f"HTTP {exc.code}" if isinstance(exc, urllib.error.HTTPError) else str(getattr(exc, "reason", exc))
            _once(
                f"post {what}",
                f"stratctl.trial: the gang AM did not take the {what} ({why}): kept in the trial's output directory",
            )
        return False


def _post_result(env: Mapping[str, str], text: str) -> None:
    """The result to the gang AM: sent once, so a failed post is tried again, a second apart."""
    tries = RESULT_TRIES if env.get(REPORT_URL) else 1
    for left in range(tries, 0, -1):
        if _post(env, "result", {"rank": _rank(env)}, text, quiet=left > 1):
            return
        if left > 1:
            time.sleep(1.0)


def _rank(env: Mapping[str, str]) -> int | None:
    return _whole(env.get(rendezvous.NODE_RANK))


def _append(env: Mapping[str, str], line: str) -> None:
    """Append one `report_record` line to `report.jsonl` in the trial's output directory
    (Slurm, YARN)."""
    directory = Path(checkpoint.START, env[OUTPUT_DIR])
    directory.mkdir(parents=True, exist_ok=True)
    # one write of one line to a file opened for appending: the ranks' lines do not interleave
    fd = os.open(directory / REPORT_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _plain(value: Any) -> Any:
    """What json cannot write by itself: numpy and torch scalars."""
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "__float__"):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _number(name: str, value: Any) -> float:
    try:
        if isinstance(value, bool | str | bytes):
            raise TypeError
        return float(value if isinstance(value, int | float) else _plain(value))
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not a number") from None


def _whole(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _once(kind: str, message: str) -> None:
    if kind not in _said:
        _said.add(kind)
        print(message, file=sys.stderr)
