"""Which packages the distribution holds: every directory of modules under stratctl/ as
found on disk, plus the packages pyproject.toml maps from other directories
(`package-dir`: templates/ as `stratctl.templates`, dashboards/ as `stratctl.dashboards`).

Everything else is in pyproject.toml. The packages are found here rather than by
`[tool.setuptools.packages.find]`, which finds packages by directory name only: it would
drop the two mapped ones, and pyproject.toml's packages override any given here. (Checked
against setuptools 84: `packages.find` returns what it finds under `where`, and a
`package-dir` entry only says where a listed package lives; it adds none. A hand-made
`packages` list is what once lost stratctl.backends.slurm and .yarn.)
"""

import tomllib
from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).parent
MAPPED = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
FOUND = find_namespace_packages(where=str(HERE), include=["stratctl", "stratctl.*"], exclude=["*.__pycache__"])

setup(packages=FOUND + sorted(MAPPED))
