"""MkDocs hooks of stratctl's documentation site (mkdocs.yml `hooks:`).

At every build, before the pages are read:
- `reference/study-file.md` is generated from `stratctl schema` (the JSON Schema of study
  files): every field with its type, default, allowed values and description, each nested
  object its own section;
- `reference/benchmarks.md` is generated from `bench/results/*.json`: one table per
  benchmark, with the commit it was measured at;
- the repository's files that pages link to (`../examples/demo.yaml`, written so that the
  link also works when the page is read on GitHub) are put into the site under `repo/`, and
  the links rewritten to them; a link to a file that does not exist is a warning, so a
  strict build fails on it.
Nothing generated is committed: a stale page cannot be.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel

log = logging.getLogger("mkdocs.hooks.stratctl")

# the pages made at every build (on_files), never committed
GENERATED = ("reference/study-file.md", "reference/benchmarks.md")
LINK = re.compile(r"(\]\()([^)\s]+)(\))")
FENCE = re.compile(r"^(```|~~~)")


# ---------------------------------------------------------------- study file reference


def _anchor(name: str) -> str:
    return "def-" + name.lower()


def _type(schema: dict) -> str:
    """A field's type in words, nested objects linked to their sections."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "anyOf" in schema or "oneOf" in schema:
        kinds = [_type(s) for s in schema.get("anyOf") or schema["oneOf"]]
        text = " or ".join(dict.fromkeys(kinds))
        by = schema.get("discriminator", {}).get("propertyName")
        return f"{text} (chosen by `{by}`)" if by else text
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of name to {_type(schema['additionalProperties'])}"
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if isinstance(kind, list):
        return " or ".join(kind)
    return kind or "any"


def _allowed(schema: dict) -> str:
    """Allowed values and bounds, also inside anyOf branches (an optional bounded number)."""
    parts = []
    if "enum" in schema:
        parts.append(", ".join(f"`{json.dumps(v)}`" for v in schema["enum"]))
    for key, word in (
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
        ("minProperties", "entries ≥"),
    ):
        if key in schema:
            parts.append(f"{word} {schema[key]}")
    if "pattern" in schema:
        parts.append(f"matches `{schema['pattern']}`")
    for branch in schema.get("anyOf", []):
        inner = _allowed(branch)
        if inner:
            parts.append(inner)
    return "; ".join(parts)


def _default(prop: dict, required: bool) -> str:
    if required:
        return "required"
    if "default" not in prop:
        return ""
    value = json.dumps(prop["default"])
    if isinstance(prop["default"], dict) and prop["default"]:
        return "each field's default"
    return f"`{value}`" if len(value) <= 40 else f"`{value[:37]}…`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def guide_meanings(guide: str) -> dict[str, str]:
    """The meaning column of the guide's field tables (docs/study-file.md), by field path.

    The schema describes the objects but few of their fields; a field it leaves undescribed
    takes the guide's words, its links made plain text (they are relative to the guide)."""
    meanings: dict[str, str] = {}
    section, header, table_prefix, first_row = "", [], "", False
    for line in guide.splitlines():
        if line.startswith("## "):
            section = line[3:].strip().strip("`")
        if not line.startswith("|"):
            header, table_prefix = [], ""
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if not header:
            header, first_row = cells, True
            continue
        if header[0] != "field" or not cells[0].startswith("`"):
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", cells[-1])
        for name in re.findall(r"`([^`]+)`", cells[0]):
            if "." in name:  # `pruner.kind`: a path; opening its table, the rows after it are its siblings
                if first_row:
                    table_prefix = name.rsplit(".", 1)[0] + "."
                meanings.setdefault(name, text)
                continue
            prefix = table_prefix if table_prefix else "" if section in ("", "Top level") else section + "."
            meanings.setdefault(prefix + name, text)
        first_row = False
    return meanings


def _meaning(meanings: dict[str, str], path: str) -> str:
    """The guide's words for a field; a top-level field the guide explains inside another
    section (`objective` under `strategy`) is found by its name."""
    if path in meanings:
        return meanings[path]
    if "." not in path:
        return next((text for key, text in meanings.items() if key.endswith("." + path)), "")
    return ""


def _table(schema: dict, path: str = "", meanings: dict[str, str] | None = None) -> list[str]:
    rows = ["| field | type | default | allowed | description |", "|---|---|---|---|---|"]
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        described = prop.get("description") or _meaning(meanings or {}, here)
        cells = [
            f"`{name}`",
            _type(prop),
            _default(prop, name in required),
            _allowed(prop),
            described,
        ]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return rows


def _refs(schema) -> list[str]:
    """The definitions a schema names, in the order they appear."""
    found = []
    if isinstance(schema, dict):
        if "$ref" in schema:
            found.append(schema["$ref"].rsplit("/", 1)[-1])
        for value in schema.values():
            found += _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            found += _refs(value)
    return found


def study_reference(schema: dict, meanings: dict[str, str] | None = None) -> str:
    """The study file reference page: the top level, then each nested object where it is used."""
    defs = schema.get("$defs", {})
    where: dict[str, list[str]] = {}
    order: list[str] = []

    def visit(node: dict, path: str) -> None:
        for name, prop in node.get("properties", {}).items():
            here = f"{path}.{name}" if path else name
            for ref in _refs(prop):
                key = here + ("[]" if prop.get("type") == "array" or "items" in json.dumps(prop) else "")
                if ref not in where:
                    where[ref] = []
                    order.append(ref)
                    if ref in defs:
                        visit(defs[ref], here)
                if key not in where[ref]:
                    where[ref].append(here)

    visit(schema, "")
    order += [name for name in defs if name not in where]
    lines = [
        "# Study file reference",
        "",
        "Generated from `stratctl schema` (the JSON Schema of study files) when this site is built.",
        "The guide to these fields is [the study file](../study-file.md). An editor with a YAML",
        "language server checks a study as you type with `stratctl schema > stratctl-study.schema.json`",
        "and `# yaml-language-server: $schema=./stratctl-study.schema.json` atop the file.",
        "",
        f"## Top level {{#{_anchor('top')}}}",
        "",
        schema.get("description", ""),
        "",
        *_table(schema, "", meanings),
    ]
    for name in order:
        node = defs.get(name)
        if node is None:
            continue
        lines += ["", f"## {name} {{#{_anchor(name)}}}", ""]
        if where.get(name):
            lines.append("Used at " + ", ".join(f"`{p}`" for p in where[name]) + ".")
            lines.append("")
        if node.get("description"):
            lines += [node["description"], ""]
        if node.get("properties"):
            lines += _table(node, where[name][0] if where.get(name) else "", meanings)
        else:
            lines.append(f"Type: {_type(node)}. {_allowed(node)}".rstrip())
    return "\n".join(lines) + "\n"


def _schema() -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "stratctl", "schema"], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)


# ---------------------------------------------------------------- benchmark tables

META = ("benchmark", "commit", "dirty", "measured_at", "machine")


def _value(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list):
        if len(value) <= 8 and all(not isinstance(v, (dict, list)) for v in value):
            return ", ".join(_value(v) for v in value) or "–"
        return f"({len(value)} values)"
    return str(value)


def _flat(value, prefix: str = "") -> dict[str, object]:
    """A nested dict as {'a / b': leaf}; long lists are counted, not shown."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix} / {key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _grid(rows: dict[str, dict], first: str) -> list[str]:
    columns = list(dict.fromkeys(c for row in rows.values() for c in row))
    lines = [
        "| " + " | ".join([first, *columns]) + " |",
        "|" + "---|" * (len(columns) + 1),
    ]
    for name, row in rows.items():
        cells = [f"`{name}`", *(_value(row.get(c)) for c in columns)]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def benchmark_section(name: str, data: dict) -> list[str]:
    lines = [f"## {data.get('benchmark', name)}", ""]
    commit = data.get("commit")
    said = [f"From `bench/results/{name}.json`."]
    if commit:
        dirty = " (with uncommitted changes in the working tree)" if data.get("dirty") else ""
        said.append(f"Measured at commit `{commit}`{dirty}")
        if data.get("measured_at"):
            said[-1] += f" on {data['measured_at']}"
        if data.get("machine"):
            said[-1] += f", {data['machine']}"
        said[-1] += "."
    else:
        said.append("The file does not say which commit it was measured at.")
    lines += [" ".join(said), ""]
    scalars = {k: v for k, v in data.items() if k not in META and not isinstance(v, (dict, list))}
    if scalars:
        lines += ["| setting or figure | value |", "|---|---|"]
        lines += [f"| `{k}` | {_cell(_value(v))} |" for k, v in scalars.items()]
        lines.append("")
    for key, value in data.items():
        if key in META or not isinstance(value, (dict, list)) or not value:
            continue
        if isinstance(value, list):
            if all(isinstance(v, dict) for v in value):
                rows = {str(i): {k: v for k, v in _flat(v).items()} for i, v in enumerate(value)}
                lines += [f"**{key}**", "", *_grid(rows, "#"), ""]
            else:
                lines += [f"**{key}**: {_value(value)}", ""]
            continue
        if all(isinstance(v, dict) for v in value.values()):
            rows = {str(k): _flat(v) for k, v in value.items()}
            lines += [f"**{key}**", "", *_grid(rows, "case"), ""]
        elif all(isinstance(v, list) and v and all(isinstance(i, dict) for i in v) for v in value.values()):
            for sub, runs in value.items():
                rows = {str(i): _flat(run) for i, run in enumerate(runs)}
                lines += [f"**{key} / {sub}**", "", *_grid(rows, "#"), ""]
        else:
            flat = _flat(value)
            lines += [f"**{key}**", "", "| | value |", "|---|---|"]
            lines += [f"| `{_cell(k)}` | {_cell(_value(v))} |" for k, v in flat.items()]
            lines.append("")
    return lines


def benchmark_tables(results: Path) -> str:
    lines = [
        "# Benchmark tables",
        "",
        "Generated from `bench/results/*.json` when this site is built: every figure the benchmarks",
        "wrote, one section per benchmark. How each was measured, and what the figures mean, is in",
        "[Benchmarks](../benchmarks.md); `make bench` measures them again.",
        "",
    ]
    files = sorted(results.glob("*.json"))
    if not files:
        log.warning("no benchmark results in %s", results)
    for path in files:
        lines += benchmark_section(path.stem, json.loads(path.read_text()))
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- repository links


def _links(markdown: str):
    """(start, end, target) of each link outside fenced code."""
    fence = False
    offset = 0
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line.lstrip()):
            fence = not fence
        elif not fence:
            for match in LINK.finditer(line):
                yield offset + match.start(2), offset + match.end(2), match.group(2)
        offset += len(line)


def _local(target: str) -> bool:
    return not (target.startswith("#") or re.match(r"^[a-z][a-z0-9+.-]*:", target))


class _Repo:
    def __init__(self, docs: Path):
        self.docs = docs.resolve()
        self.root = self.docs.parent

    def virtual(self, path: Path) -> str | None:
        """Where a file of the repository is in the site: docs/ as it is, the rest under repo/."""
        path = path.resolve()
        if path.is_relative_to(self.docs):
            return path.relative_to(self.docs).as_posix()
        if path.is_relative_to(self.root):
            return "repo/" + path.relative_to(self.root).as_posix()
        return None


_state: dict = {}


def on_files(files: Files, config) -> Files:
    repo = _Repo(Path(config["docs_dir"]))
    _state["repo"] = repo
    root = repo.root
    study_file, benchmarks = GENERATED
    meanings = guide_meanings((repo.docs / "study-file.md").read_text())
    files.append(File.generated(config, study_file, content=study_reference(_schema(), meanings)))
    files.append(File.generated(config, benchmarks, content=benchmark_tables(root / "bench" / "results")))
    # the repository's files that pages link to, and those that linked .md files link to
    sources = {f.src_uri: Path(f.abs_src_path) for f in files if f.src_uri.endswith(".md") and f.abs_src_path}
    queue = list(sources.values())
    added: set[str] = set()
    while queue:
        page = queue.pop()
        for _, _, target in _links(page.read_text()):
            if not _local(target):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            where = repo.virtual(path)
            if where is None or not where.startswith("repo/") or where in added:
                continue
            if not path.is_file():
                continue  # said at on_page_markdown, with the page that links
            added.add(where)
            copy = File.generated(config, where, abs_src_path=str(path))
            copy.inclusion = InclusionLevel.INCLUDED  # .importlinter too, though it starts with a dot
            files.append(copy)
            if path.suffix == ".md":
                queue.append(path)
    return files


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    """Links to the repository's files point at their copies under repo/."""
    repo: _Repo = _state["repo"]
    source = Path(page.file.abs_src_path) if page.file.abs_src_path else None
    if source is None:
        return markdown
    here = os.path.dirname(page.file.src_uri)
    out, last = [], 0
    for start, end, target in _links(markdown):
        if not _local(target):
            continue
        path_part, _, fragment = target.partition("#")
        path = (source.parent / path_part).resolve()
        if repo.virtual(path) in GENERATED:
            continue  # a page made at this build, linked as it will be
        if not path.exists():
            log.warning("%s links to %s, which does not exist", page.file.src_uri, target)
            continue
        if path.is_dir():
            log.warning("%s links to the directory %s: link a file in it", page.file.src_uri, target)
            continue
        where = repo.virtual(path)
        if where is None:
            log.warning("%s links to %s, outside the repository", page.file.src_uri, target)
            continue
        new = os.path.relpath(where, here or ".") + (f"#{fragment}" if fragment else "")
        out.append(markdown[last:start] + new)
        last = end
    out.append(markdown[last:])
    return "".join(out)
