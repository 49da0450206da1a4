"""The Grafana board and the alerting rules (dashboards/board.py): committed as generated,
valid for the Grafana schema the SDK targets, printed by `stratctl dashboard`; the rules
pass promtool's check and its unit test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stratctl.cli.main import app

REPO = Path(__file__).resolve().parents[3]
DASHBOARDS = REPO / "dashboards"


def generator():
    import importlib.util

    spec = importlib.util.spec_from_file_location("board", DASHBOARDS / "board.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_board_and_rules_are_the_generators_output():
    gen = generator()
    assert (DASHBOARDS / "stratctl.json").read_text() == gen.board_text(), "regenerate: python dashboards/board.py"
    assert (DASHBOARDS / "stratctl-rules.yaml").read_text() == gen.rules_text(), (
        "regenerate: python dashboards/board.py"
    )


def test_the_board_is_valid_for_the_grafana_schema_of_the_sdk():
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    data = json.loads((DASHBOARDS / "stratctl.json").read_text())
    model = Dashboard.from_json(data)  # the SDK's model of Grafana's dashboard schema reads it back whole
    assert json.loads(json.dumps(model, cls=JSONEncoder, sort_keys=True)) == data
    panels = [p for p in data["panels"] if p["type"] != "row"]
    assert len(panels) == len(generator().PANELS) == 12
    for panel in panels:
        assert panel["type"] == "timeseries" and panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
    assert [v["name"] for v in data["templating"]["list"]] == ["datasource", "study"]


def test_stratctl_dashboard_prints_them():
    runner = CliRunner()
    assert runner.invoke(app, ["dashboard"]).output == (DASHBOARDS / "stratctl.json").read_text()
    assert runner.invoke(app, ["dashboard", "--rules"]).output == (DASHBOARDS / "stratctl-rules.yaml").read_text()


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: testbed/packages.sh installs Debian's prometheus package")
        pytest.skip("promtool (Debian's prometheus package, testbed/packages.sh) is not installed")
    return found


def test_the_rules_pass_promtool():
    tool = promtool()
    check = subprocess.run(
        [tool, "check", "rules", "stratctl-rules.yaml"], cwd=DASHBOARDS, capture_output=True, text=True
    )
    assert check.returncode == 0 and f"SUCCESS: {len(generator().RULES)} rules found" in check.stdout, check
    unit = subprocess.run(
        [tool, "test", "rules", "stratctl-rules.test.yaml"], cwd=DASHBOARDS, capture_output=True, text=True
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr
