"""Checkpoints: where a trial keeps them, whether this attempt resumes, and an atomic save
with the latest one back.

A checkpoint is one file `step-<step>.<pkl|bin>` in the trial's checkpoint directory, and
`latest` is a small file naming the newest. Both are written the same way: to a temporary
file in the same directory, flushed and fsync'd, then renamed over the old name
(`os.replace`, atomic within a file system) and the directory fsync'd. A crash at any point
leaves either the old `latest` or the new one, each naming a whole file; the pointer moves
only once the file it names is complete, and pruning (keep the last K) runs only after it
moved. `latest()` trusts the pointer, and without one (a crash during the very first save)
takes the highest complete step: only complete files ever carry a step file's name.

The directory is `STRATCTL_CHECKPOINT_DIR` (the study's `checkpoint.location`, the same for
every attempt of a trial) when it is a local or mounted path. An object-store URL
(`s3://...`) is for the storage's own client: `checkpoint_location()` gives it as is.
"""

from __future__ import annotations

import os
import pickle
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from stratctl import labels
from stratctl.trial.contract import OUTPUT_DIR, backend

POINTER = "latest"
KEEP = 3
_NAME = re.compile(r"^step-(\d+)\.(pkl|bin)$")
_TMP = ".tmp-"
# a temporary file this old is what a crashed save left (a live save keeps writing to its
# own): removed by the next save, never sooner, so another attempt's save in progress
# (an old pod still in its grace period) is not cut short
STALE_SECONDS = 600.0
# relative locations are relative to where the trial started (Slurm's output directory is
# relative to the job's working directory), not to wherever the script chdir'd since
START = os.getcwd()
_said: set[str] = set()


def checkpoint_location(env: Mapping[str, str] | None = None) -> str:
    """The checkpoint location as stratctl gives it (a path or a URL; "" when the study sets none)."""
    return (os.environ if env is None else env).get(labels.ENV_CHECKPOINT, "")


def checkpoint_dir(env: Mapping[str, str] | None = None) -> Path:
    """The trial's checkpoint directory: the study's `checkpoint.location`; without one, a
    `checkpoints` directory in the trial's output directory (Slurm, YARN) or in the working
    directory (by hand, or on Kubernetes, where it does not outlive the pod: said once).
    ValueError for an object-store URL."""
    env = os.environ if env is None else env
    location = checkpoint_location(env).removeprefix("file://")
    if "://" in location:
        raise ValueError(
            f"{labels.ENV_CHECKPOINT}={location!r} is not a local directory: save and load "
            "it with your storage's client (stratctl.trial.checkpoint_location() gives it)"
        )
    if not location:
        location = str(Path(env.get(OUTPUT_DIR) or ".") / "checkpoints")
        if backend(env) == "kubernetes" and "no location" not in _said:
            _said.add("no location")
            print(
                f"stratctl.trial: the study sets no checkpoint.location; checkpoints go to {location}, "
                "inside the container: they do not survive the pod",
                file=sys.stderr,
            )
    return Path(START, location)


def resuming(env: Mapping[str, str] | None = None) -> bool:
    """True when stratctl started this attempt to resume an earlier one (`STRATCTL_RESUME=1`).
    Resume whenever `latest()` finds a checkpoint all the same: a gang restarted in place
    after an eviction is the same attempt, told nothing."""
    return (os.environ if env is None else env).get(labels.ENV_RESUME) == "1"


@dataclass(frozen=True)
class Saved:
    """One complete checkpoint on disk."""

    step: int
    path: Path

    def read(self) -> bytes:
        return self.path.read_bytes()

    def load(self) -> Any:
        """What was saved: the object for a pickled save, the bytes otherwise."""
        if self.path.suffix == ".pkl":
            with self.path.open("rb") as f:
                return pickle.load(f)
        return self.read()


class Checkpoints:
    """The checkpoints in one directory, of which `save` keeps the last `keep` (by step).
    One process saves into a directory: rank 0, or each rank into its own."""

    def __init__(self, directory: str | Path | None = None, keep: int = KEEP):
        if keep < 1:
            raise ValueError(f"keep must be 1 or more (got {keep})")
        self.dir = Path(directory) if directory is not None else checkpoint_dir()
        self.keep = keep

    def save(self, data: Any, step: int) -> Saved:
        """Save a checkpoint of `step` and make it the latest: bytes as they are (what
        `torch.save(state, buffer)` wrote into an `io.BytesIO`, say), anything else pickled.
        Returns it once it is durable."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be a whole number of 0 or more (got {step!r})")
        self.dir.mkdir(parents=True, exist_ok=True)
        raw = isinstance(data, bytes | bytearray | memoryview)
        path = self.dir / f"step-{step:09d}.{'bin' if raw else 'pkl'}"

        def write(f: BinaryIO) -> None:
            if raw:
                f.write(data)
            else:
                pickle.dump(data, f, protocol=pickle.HIGHEST_PROTOCOL)

        atomic_write(path, write)
        atomic_write(self.dir / POINTER, lambda f: f.write(path.name.encode() + b"\n"))
        self._prune(path)
        return Saved(step, path)

    def latest(self) -> Saved | None:
        """The latest complete checkpoint, or None when there is none yet."""
        try:
            name = (self.dir / POINTER).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            name = ""
        match = _NAME.match(name)
        if match and (self.dir / name).is_file():
            return Saved(int(match[1]), self.dir / name)
        steps = self._steps()  # no pointer yet, or a hand-edited one: the highest complete step
        return Saved(*steps[-1]) if steps else None

    def _steps(self) -> list[tuple[int, Path]]:
        found = [(int(m[1]), p) for p in _listdir(self.dir) if (m := _NAME.match(p.name))]
        return sorted(found)

    def _prune(self, latest: Path) -> None:
        """Keep the newest `keep` steps and the latest whatever its step; remove the
        temporary files crashed saves left."""
        for _, path in self._steps()[: -self.keep]:
            if path != latest:
                path.unlink(missing_ok=True)
        now = time.time()
        for path in _listdir(self.dir):
            if _TMP in path.name and path.name.startswith("."):
                try:
                    if now - path.stat().st_mtime > STALE_SECONDS:
                        path.unlink()
                except FileNotFoundError:
                    pass


def save(data: Any, step: int, keep: int = KEEP) -> Saved:
    """Save a checkpoint in the trial's checkpoint directory (see `Checkpoints.save`)."""
    return Checkpoints(keep=keep).save(data, step)


def latest() -> Saved | None:
    """The trial's latest complete checkpoint, or None (see `Checkpoints.latest`)."""
    return Checkpoints().latest()


def atomic_write(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    """Give `path` the content `write` puts in a binary file, all of it or none: readers
    see the old file or the new one, never a part (the directory must exist)."""
    # a name of its own for every write: a save from the SIGTERM hook may interrupt one in
    # progress in the same process, and must not write into its file. Not mkstemp: its
    # files are private (0600), and stratctl may read a result as another user (YARN)
    tmp = path.with_name(f".{path.name}{_TMP}{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask decides, as for any file
    try:
        with open(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes on disk before the name says they are
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)  # the rename itself on disk before anything builds on it


def _listdir(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # a platform without directory handles: the rename is as durable as it gets
    try:
        os.fsync(fd)
    except OSError:
        pass  # some network file systems refuse fsync on a directory; the rename happened
    finally:
        os.close(fd)
