"""A study's blocks on Slurm (merged submissions, core/merging.py): which trials each
block (one job array) carries, in task order, from the files written before it was sent,
and the task ids of an array's pending remainder as squeue says them (pure, but for
`read_blocks`). state.py reads a block's tasks back as its trials with them."""

from __future__ import annotations

from pathlib import Path

ARRAY_LIMIT = "JobArrayTaskLimit"  # a task its array's throttle holds back
QUEUED = "queued in its block (the job array's throttle)"
BLOCK_MARK = "@"  # a block's comment names `@<block>` where an attempt's names its trial
BLOCKS = ".blocks"  # the study's blocks: their trials, in its output directory


def task_ids(text: str) -> list[int]:
    """The task ids of a job array's pending remainder as squeue says them: `4-19%4`,
    `3,17-999%16`, `5` (the `%` part is its throttle)."""
    out: list[int] = []
    for part in text.split("%", 1)[0].split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            out.extend(range(int(first), int(last or first) + 1))
    return out


def read_blocks(directory: Path) -> dict[str, list[str]]:
    """The blocks of a study (merged submissions): block name -> its trials in task order,
    from the files written before each block was sent (`.blocks/<name>`, a trial a line)."""
    out = {}
    for path in sorted((directory / BLOCKS).glob("block-*")):
        if not path.name.removeprefix("block-").isdigit():  # a block's task file or log, not its list
            continue
        try:
            out[path.name] = path.read_text().split()
        except OSError:
            continue
    return out
