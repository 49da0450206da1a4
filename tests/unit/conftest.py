"""Fixtures shared by the unit tests."""

from __future__ import annotations

import textwrap

import pytest

from tests.unit.loop import STUDY


@pytest.fixture
def study_file(tmp_path):
    def write(extra: str = "") -> str:
        path = tmp_path / "study.yaml"
        path.write_text(STUDY + textwrap.dedent(extra))
        return str(path)

    return write
