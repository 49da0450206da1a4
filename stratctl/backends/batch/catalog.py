"""The studies on batch schedulers (Slurm, YARN) known by name: what `status NAME`, `wait`,
`logs`, `delete`, `drain` and `resume` look up when they are given a study's name rather
than its file.

Slurm and YARN forget a study's ended jobs (MinJobAge, max-completed-applications), so a
study on them lives in its study directory (backends/batch/scheduler.py `study_directory`), where its
attempts leave their marks, logs and results. At submit stratctl keeps there the study as
submitted (`.study/study.yaml`, and `.study/study.json`: its file, backend and cluster), as the
Kubernetes record keeps the spec in the cluster, and adds an entry to the user's catalog,
`<state>/studies/<backend>/<name>.json` (`<state>`: STRATCTL_STATE_DIR, else
$XDG_STATE_HOME/stratctl, else ~/.local/state/stratctl), which points at that directory. A
name is then found from any directory, and from any machine that shares the user's home
(a cluster's login nodes); where the catalog does not know it, the study directory the
scheduler still shows (Slurm: a job's log file) names it.

`choose` is the pure decision of which backend a name means.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stratctl.errors import UsageError

if TYPE_CHECKING:
    from stratctl.core.spec import Study

ATTEMPT_BACKENDS = ("slurm", "yarn")
BACKENDS = ("kubernetes", *ATTEMPT_BACKENDS)
SPEC = ".study/study.yaml"  # the study as submitted, in its study directory (beside its trials' directories)
ABOUT = ".study/study.json"  # where it came from: its file, backend and cluster


@dataclass(frozen=True)
class Entry:
    """One study known by name: its backend, its study directory, the file it was
    submitted from (None: standard input) and its cluster as `status` names it."""

    name: str
    backend: str
    directory: str
    file: str | None = None
    where: str = ""


def state_dir(given: Mapping[str, str] | None = None) -> Path:
    """The user's stratctl state directory (the catalog lives under it)."""
    env: Mapping[str, str] = os.environ if given is None else given
    if env.get("STRATCTL_STATE_DIR"):
        return Path(env["STRATCTL_STATE_DIR"]).expanduser()
    base = Path(env["XDG_STATE_HOME"]).expanduser() if env.get("XDG_STATE_HOME") else Path.home() / ".local" / "state"
    return base / "stratctl"


def _path(root: Path, backend: str, name: str) -> Path:
    return root / "studies" / backend / f"{name}.json"


def keep(entry: Entry, text: str, root: Path | None = None) -> None:
    """At submit: the study as submitted into its study directory, and its catalog entry."""
    directory = Path(entry.directory)
    (directory / SPEC).parent.mkdir(parents=True, exist_ok=True)
    _write(directory / SPEC, text)
    _write(directory / ABOUT, json.dumps(asdict(entry), indent=2) + "\n")
    path = _path(root or state_dir(), entry.backend, entry.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, json.dumps(asdict(entry), indent=2) + "\n")


def forget(entry: Entry, root: Path | None = None) -> None:
    """After `delete`: the study's catalog entry removed (its directory is the caller's)."""
    path = _path(root or state_dir(), entry.backend, entry.name)
    try:
        if Entry(**json.loads(path.read_text())).directory == entry.directory:
            path.unlink()
    except (OSError, ValueError, TypeError):
        pass


def entries(name: str, root: Path | None = None) -> list[Entry]:
    """The catalog's entries of a study name, one per backend, whose study directory is
    still there."""
    out = []
    for backend in ATTEMPT_BACKENDS:
        entry = _read(_path(root or state_dir(), backend, name))
        if entry is not None and (Path(entry.directory) / SPEC).is_file():
            out.append(entry)
    return out


def in_directory(directory: Path) -> Entry | None:
    """The entry a study directory says of itself (its `study.json`), None when it has none."""
    entry = _read(directory / ABOUT)
    if entry is None or not (directory / SPEC).is_file():
        return None
    return Entry(entry.name, entry.backend, str(directory), entry.file, entry.where)


def choose(name: str, found: list[Entry], backend: str | None) -> Entry | None:
    """Which study a name means (pure): the catalog's entry on the backend `--backend`
    names, or its one entry; None for a Kubernetes study (named by its record in the
    cluster). Two backends knowing the name, and no `--backend`: refused, saying which."""
    if backend == "kubernetes":
        return None
    if backend is not None:
        return next((e for e in found if e.backend == backend), None)
    if len(found) > 1:
        places = " and ".join(f"{e.backend} ({e.directory})" for e in found)
        raise UsageError(f"study {name} is known on {places}: say which with --backend slurm or --backend yarn")
    return found[0] if found else None


def unknown(name: str, backend: str, root: Path | None = None) -> UsageError:
    """One line for a name the backend's catalog does not know."""
    where = _path(root or state_dir(), backend, name).parent
    return UsageError(
        f"no {backend} study {name} is known here (none submitted from this account, in {where}): "
        f"give the study's file instead of its name"
    )


def _read(path: Path) -> Entry | None:
    try:
        data = json.loads(path.read_text())
        return Entry(**{k: data.get(k) for k in ("name", "backend", "directory", "file", "where") if k in data})
    except (OSError, ValueError, TypeError):
        return None


def _write(path: Path, text: str) -> None:
    """Written whole or not at all (a rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def study_of(entry: Entry) -> Study:
    """The study as it was submitted (its study directory's copy), its relative paths
    resolved against the file it was submitted from, as they were then."""
    from stratctl.core import document
    from stratctl.core.spec import study_from_document

    return study_from_document(document.read(Path(entry.directory) / SPEC), Path(entry.file) if entry.file else None)
