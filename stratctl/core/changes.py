"""Changes: what editing a study did to the trials already submitted, decided without a cluster.

A study submitted again after an edit is compared with what it left in the cluster: its
fields (dotted paths of the study file, `trial.image`, `space.lr.high`) against the spec
kept in the study record, and each trial's rendered manifests (their spec hash) against
the hash its job carries. Trials that would render differently, or that the study no
longer has, make the rerun a change the user must choose to apply; added trials and
edits that render nothing differently (a comment, `throttle.qps`) do not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SPEC_LIMIT = 64 * 1024  # characters of canonical study spec kept in the record; above, fields are unknown
FIELDS_SHOWN = 8  # changed fields named in a message; the rest are counted


def spec_text(study: Any) -> str:
    """The study spec as kept in its record: the fields its file sets (so that it renders
    again as it did) as compact JSON in the file's order (the order of `space` orders the
    trials), or "" when above SPEC_LIMIT."""
    text = json.dumps(study.model_dump(mode="json", exclude_unset=True), separators=(",", ":"), ensure_ascii=True)
    return text if len(text) <= SPEC_LIMIT else ""


def changed_fields(old: Any, new: Any, path: str = "") -> list[str]:
    """Dotted paths of the fields that differ between two study specs (as dumped to JSON).

    Mappings are compared key by key, lists of equal length item by item (`trial.args.1`);
    a list that grew or shrank is one change at its own path."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                out.append(sub)
            else:
                out.extend(changed_fields(old[key], new[key], sub))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            out.extend(changed_fields(a, b, f"{path}.{i}" if path else str(i)))
        return out
    return [] if old == new else [path or "(the whole study)"]


@dataclass(frozen=True)
class Comparison:
    """A rerun's study against what the cluster holds of the study."""

    fields: tuple[str, ...] | None  # changed fields; None when the record does not say (an older record)
    changed: tuple[str, ...]  # trials in the cluster whose manifests the study now renders differently
    removed: tuple[str, ...]  # trials in the cluster the study no longer has
    added: tuple[str, ...]  # trials of the study not in the cluster yet
    unchanged: int  # trials in the cluster rendered as they are

    @property
    def refused(self) -> bool:
        """Whether running it as is would pass off the old results as the new study's."""
        return bool(self.changed or self.removed)

    @property
    def existing(self) -> int:
        return len(self.changed) + len(self.removed) + self.unchanged


def compare(
    old_spec: dict[str, Any] | None,
    new_spec: dict[str, Any],
    existing: Mapping[str, str | None],
    rendered: Mapping[str, str],
    spec_changed: bool,
) -> Comparison:
    """Classify the trials in the cluster (`existing`: trial → the spec hash its latest job
    carries, None when unknown — a finished trial whose jobs were cleaned up) against the
    study's (`rendered`: trial → the hash it renders now for that attempt).

    An unknown hash counts as changed exactly when the study spec changed (`spec_changed`),
    the best the cluster can tell without the job. Trials the study does not have count as
    removed only then too: with the spec as last submitted they are what an accepted
    change (`--rerun-changed`) left behind, not a new one."""
    changed, removed, unchanged = [], [], 0
    for trial in sorted(existing):
        old = existing[trial]
        if trial not in rendered:
            if spec_changed:
                removed.append(trial)
        elif (old is None and spec_changed) or (old is not None and old != rendered[trial]):
            changed.append(trial)
        else:
            unchanged += 1
    added = tuple(sorted(t for t in rendered if t not in existing))
    fields = tuple(changed_fields(old_spec, new_spec)) if old_spec is not None else None
    return Comparison(fields, tuple(changed), tuple(removed), added, unchanged)


def fields_text(fields: tuple[str, ...] | None) -> str:
    if fields is None:
        return "fields unknown: the study record predates field-level comparison"
    if not fields:
        return "no field of the study file changed: its templates or stratctl's rendering did"
    shown = ", ".join(fields[:FIELDS_SHOWN])
    more = len(fields) - FIELDS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def summary(study: str, c: Comparison) -> str:
    """One line: what changed and how many trials it touches."""
    parts = []
    if c.changed:
        parts.append(f"{len(c.changed)} of {c.existing} trial(s) in the cluster would run with a different spec")
    if c.removed:
        parts.append(f"{len(c.removed)} trial(s) in the cluster are no longer in the study")
    if c.added:
        parts.append(f"{len(c.added)} trial(s) added")
    if not parts:
        parts.append("no trial in the cluster renders differently")
    return f"study {study} changed since it was submitted ({fields_text(c.fields)}): {'; '.join(parts)}"


def refusal(study: str, c: Comparison, file: str = "FILE") -> str:
    """The message of a refused rerun: what changed, and the ways forward."""
    return (
        f"{summary(study, c)}.\n"
        f"  stratctl submit {file} --rerun-changed   changed trials get new attempts with the new spec "
        "(running ones are replaced; trials no longer in the study are stopped); unchanged ones, "
        "finished or running, are kept\n"
        f"  or give the study a new name (field `name`) to run the new version beside the old one"
    )
