"""A study's driver mark on Slurm and YARN (run/driver.py): `.driver.json` in the study's
directory, beside its trials (on Slurm's shared filesystem the same for every login node;
on YARN the directory of the machine that submits). Each write happens under an exclusive
`flock` of `.driver.lock` and only if the version it read is still the file's, then
replaces the file whole (a rename): two drivers never both think they won, and a reader
never sees half a mark.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stratctl.run.driver import Mark

MARK_FILE = ".driver.json"
LOCK_FILE = ".driver.lock"


class FileStore:
    """The mark of one study, kept in its directory (run/driver.py's MarkStore)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.path = directory / MARK_FILE
        self.where = str(self.path)

    def _load(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def read(self) -> tuple[Mark | None, str]:
        data = self._load()
        if data is None:
            return None, ""
        try:
            mark = Mark(
                str(data["holder"]),
                float(data["since"]),
                float(data["renewed"]),
                float(data["ttl"]),
                str(data.get("take_over") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return None, str(data.get("version", ""))
        return mark, str(data.get("version", ""))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def write(self, mark: Mark, version: str) -> bool:
        with self._locked():
            current = self._load()
            if (str(current.get("version", "")) if current else "") != version:
                return False
            data = {
                "holder": mark.holder,
                "since": mark.since,
                "renewed": mark.renewed,
                "ttl": mark.ttl,
                "take_over": mark.take_over,
                "version": (int(version) if version.isdigit() else 0) + 1,
            }
            tmp = self.path.with_name(f"{MARK_FILE}.{os.getpid()}")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.path)
            return True

    def remove(self, version: str) -> None:
        with self._locked():
            current = self._load()
            if current is not None and str(current.get("version", "")) == version:
                self.path.unlink(missing_ok=True)
