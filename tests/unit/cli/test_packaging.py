"""The built wheel holds what an installed stratctl imports and reads: every module of every
package under stratctl/ (stratctl.backends.slurm and stratctl.backends.yarn once went missing from a hand-made
list), the manifest and script templates, the dashboards, and the `stratctl` command."""

from __future__ import annotations

import zipfile

import pytest

from tests.install.wheel import REPO, build_wheel, source_files


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    path = build_wheel(tmp_path_factory.mktemp("wheel"))
    with zipfile.ZipFile(path) as archive:
        yield (
            path,
            set(archive.namelist()),
            archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))).decode(),
        )


def test_every_module_of_every_package_is_in_the_wheel(wheel):
    _, names, _ = wheel
    modules = [f for f in source_files() if f.startswith("stratctl/") and f.endswith(".py")]
    packages = {m.rsplit("/", 1)[0] for m in modules}
    assert {
        "stratctl",
        "stratctl/backends/slurm",
        "stratctl/backends/yarn",
        "stratctl/backends/kubernetes",
        "stratctl/cli",
        "stratctl/core",
        "stratctl/run",
    } <= packages
    assert [m for m in modules if m not in names] == []
    assert {f"{p}/__init__.py" for p in packages if (REPO / p / "__init__.py").exists()} <= names


def test_templates_and_dashboards_are_installed_as_packages_with_their_data(wheel):
    _, names, _ = wheel
    templates = [f.split("/", 1)[1] for f in source_files() if f.startswith("templates/") and f.endswith(".j2")]
    assert {"slurm-job.sh.j2", "yarn-task.sh.j2", "volcano-job.yaml.j2", "batch-job.yaml.j2"} <= set(templates)
    assert [t for t in templates if f"stratctl/templates/{t}" not in names] == []
    boards = [
        f.split("/", 1)[1] for f in source_files() if f.startswith("dashboards/") and f.endswith((".json", ".yaml"))
    ]
    assert "stratctl.json" in boards
    assert [b for b in boards if f"stratctl/dashboards/{b}" not in names] == []
    assert {"stratctl/templates/__init__.py", "stratctl/dashboards/__init__.py"} <= names


def test_the_wheel_installs_the_stratctl_command_and_nothing_beside_the_package(wheel):
    _, names, entry_points = wheel
    assert "stratctl = stratctl.cli.entry:main" in entry_points
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"stratctl"}
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
