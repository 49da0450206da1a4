"""The wheel of stratctl as users get it, built from a copy of the source tree (the files git
tracks or would track: no build/, *.egg-info or caches of the work tree, which the build
leaves untouched), and a fresh virtualenv with that wheel installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def source_files(repo: Path = REPO) -> list[str]:
    """The source tree's files, relative to it: tracked, or new and not ignored."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted({name for name in listed.split("\0") if name and (repo / name).is_file()})


def copy_source(dest: Path, repo: Path = REPO) -> Path:
    for name in source_files(repo):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, target)
    return dest


def build_wheel(work: Path, repo: Path = REPO) -> Path:
    """Build the wheel from a copy of the source tree under `work`; its path."""
    source, out = copy_source(work / "src", repo), work / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"pip wheel failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    wheels = list(out.glob("stratctl-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def fresh_venv(where: Path, wheel: Path) -> Path:
    """A new virtualenv holding the wheel and its dependencies (from the package index, or
    pip's cache); its bin directory. Without bytecode: compiling SciPy's and the Kubernetes
    client's modules is a third of the install's time and proves nothing about the wheel."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    bin_dir = where / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    done = subprocess.run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-compile",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert done.returncode == 0, f"pip install of {wheel.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return bin_dir
