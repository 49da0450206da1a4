"""The documentation: a short README that starts with the two commands, pages whose every
relative link resolves (on GitHub as on the site), generated pages that cover what they
are generated from, and a site that builds strictly."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import yaml

from stratctl.core.spec import json_schema

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _hooks():
    spec = importlib.util.spec_from_file_location("stratctl_docs_hooks", DOCS / "gen" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _outside_code(text: str) -> str:
    """The text without fenced code blocks and inline code (a link shown as code is not a link)."""
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _slug(heading: str) -> str:
    """A heading's anchor as MkDocs (Python-Markdown's toc) makes it, or its explicit {#id}."""
    explicit = re.search(r"\{#([^}]+)\}\s*$", heading)
    if explicit:
        return explicit.group(1)
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^(```|~~~).*?^\1", "", path.read_text(), flags=re.S | re.M)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail to docs/"
    top = "\n".join(lines[:30])
    block = re.search(r"```sh\n(.*?)```", top, flags=re.S)
    assert block, "the first 30 lines of README.md hold no ```sh block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, flags=re.M) and re.search(r"^test:", makefile, flags=re.M)


def test_every_relative_link_of_the_readme_and_the_docs_resolves_on_github_too():
    generated = {DOCS / page for page in _hooks().GENERATED}
    broken = []
    checked = 0
    for page in _pages():
        for target in LINK.findall(_outside_code(page.read_text())):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:
            path_part, _, fragment = target.partition("#")
            path = (page.parent / path_part).resolve() if path_part else page
            checked += 1
            if path in generated:  # built on the site only: the link is broken on GitHub
                broken.append(f"{page.relative_to(ROOT)}: {target} (generated at build time, not in the repository)")
            elif not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and path.suffix == ".md" and fragment not in _anchors(path):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert checked > 100  # the README and the pages are read, not skipped
    assert broken == []


def test_the_readme_links_into_the_docs():
    links = {t for t in LINK.findall(README.read_text()) if t.startswith("docs/")}
    for page in ("getting-started.md", "study-file.md", "commands.md", "architecture.md", "benchmarks.md"):
        assert any(link.split("#")[0] == f"docs/{page}" for link in links), page


def test_every_page_of_the_nav_exists_or_is_generated():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))
    assert config["strict"] is True

    def pages(nav):
        for entry in nav:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            yield from pages(value) if isinstance(value, list) else [value]

    generated = set(_hooks().GENERATED)
    for page in pages(config["nav"]):
        if page in generated:
            continue
        real = ROOT / page.removeprefix("repo/") if page.startswith("repo/") else DOCS / page
        assert real.is_file(), page
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert on_disk <= set(pages(config["nav"])), on_disk - set(pages(config["nav"]))


def test_the_study_file_reference_has_every_field_of_the_schema():
    hooks = _hooks()
    schema = json_schema()
    page = hooks.study_reference(schema, hooks.guide_meanings((DOCS / "study-file.md").read_text()))
    sections = re.split(r"^## ", page, flags=re.M)
    by_name = {s.split(" ", 1)[0]: s for s in sections[1:]}
    assert set(by_name) == {"Top", *schema["$defs"]}
    for name, node in [("Top", schema), *schema["$defs"].items()]:
        for field in node.get("properties", {}):
            assert re.search(rf"^\| `{re.escape(field)}` \|", by_name[name], flags=re.M), (name, field)
    # a default, allowed values and a bound, from the schema itself
    assert '| `workload` | string | `"volcano"` | `"volcano"`, `"batch"` |' in page
    assert "| `max_preemptions` | integer | `10` | ≥ 0 |" in by_name["Retries"]
    # a field the schema leaves undescribed takes the guide's words
    assert "What `submit` does with a trial's finished jobs." in by_name["Top"]


def test_the_benchmark_tables_have_every_result_file_and_its_commit(tmp_path):
    hooks = _hooks()
    results = sorted((ROOT / "bench" / "results").glob("*.json"))
    assert results
    page = hooks.benchmark_tables(ROOT / "bench" / "results")
    for path in results:
        data = json.loads(path.read_text())
        assert f"From `bench/results/{path.name}`." in page
        if data.get("commit"):
            assert f"Measured at commit `{data['commit']}`" in page
    # a new result file is a new section, its nested figures a table
    (tmp_path / "made-up.json").write_text(
        json.dumps({"benchmark": "made-up", "commit": "abc1234", "cases": {"a": {"seconds": 1.5}, "b": {"seconds": 3}}})
    )
    made = hooks.benchmark_tables(tmp_path)
    assert "## made-up" in made and "Measured at commit `abc1234`" in made
    assert "| `a` | 1.5 |" in made and "| `b` | 3 |" in made


def test_the_site_builds_strictly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)},
    )
    assert result.returncode == 0, result.stderr
    site = tmp_path / "site"
    reference = (site / "reference" / "study-file.html").read_text()
    assert "max_preemptions" in reference
    assert (site / "reference" / "benchmarks.html").is_file()
    assert (site / "repo" / "examples" / "demo.yaml").read_text() == (ROOT / "examples" / "demo.yaml").read_text()
