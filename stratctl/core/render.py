"""Rendering: one trial attempt → the Kubernetes manifests that run it, as dicts.

The manifest templates (templates/*.j2, or a user templates directory) are Jinja2 run in
the sandbox with StrictUndefined; their output is parsed with safe YAML. Rendering is a
pure function of (study, trial, attempt, resume).

It is also fast, because a study submits thousands of trials: when a template uses
trial-level values only as `{{ x | tojson }}` (the bundled ones do), it is rendered and
parsed once per study with placeholders, and each trial only fills in the holes. Other
templates are rendered per trial. Either way the study's own template strings (args,
env, annotations, ...) are then rendered per trial, and stratctl stamps its labels,
annotations and STRATCTL_* env vars in Python (stamp.py), so user templates cannot forget them.
A backend whose pods learn their peers from the manifests (Kubernetes) hands the Renderer
the step that stamps the rendezvous contract (core/contract.py); the others hand none.
"""

from __future__ import annotations

import marshal
import re
import secrets
from collections.abc import Callable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from jinja2 import Template, meta, nodes

from stratctl import labels
from stratctl.core import sandbox, shape, stamp, tree
from stratctl.core.contract import Layout, Rendezvous
from stratctl.core.digest import canonical, digest, hash_text
from stratctl.core.model import parse_duration
from stratctl.core.space import Trial, attempt_name, bulk, expand
from stratctl.core.spec import Study, load_study
from stratctl.core.templates import Interpolation, Templates
from stratctl.core.variables import min_resources as min_resources
from stratctl.core.variables import study_context
from stratctl.errors import Problem, StudyError

_YamlLoader: type[Any]
try:
    _YamlLoader = yaml.CSafeLoader
except AttributeError:  # PyYAML built without libyaml
    _YamlLoader = yaml.SafeLoader

DEFAULT_TEMPLATES = {"volcano": "volcano-job.yaml.j2", "batch": "batch-job.yaml.j2"}
# Variables whose value changes from trial to trial (the rest are per study).
TRIAL_VARIABLES = frozenset(sandbox.VARIABLES) - {"study", "namespace"}


def bundled_templates() -> Path:
    return Path(str(resources.files("stratctl.templates")))


def validate(path: str | Path, rendezvous_for: Callable[[Study], Rendezvous | None]) -> tuple[Study, list[Trial]]:
    """Everything short of the cluster: load the study, expand it, render every trial (with
    the rendezvous step `rendezvous_for` chooses for its backend, as
    stratctl.backends.rendezvous_for does), so
    that a template failing for some parameter values (a division by zero) fails here,
    not halfway through a submit."""
    study = load_study(path)
    trials = expand(study)
    renderer = Renderer(study, rendezvous=rendezvous_for(study))
    with bulk():
        for trial in trials:
            renderer.render(trial)
    if study.cost.per_trial:
        for trial in trials:
            renderer.expected_seconds(trial)
    return study, trials


def spec_hash(manifests: list[dict[str, Any]]) -> str:
    """Stable short hash of manifests, ignoring the spec-hash labels themselves (and the shard
    labels, which are set after it)."""
    return digest(tree.without_hash(manifests))


class Renderer:
    """Renders the attempts of one study's trials; build once, call `render` per attempt.
    `rendezvous`: the step that stamps the rendezvous contract on the manifests, handed in by
    the study's backend (stratctl.backends.rendezvous_for), None where the backend gives its
    processes the contract itself."""

    def __init__(self, study: Study, templates_dir: Path | None = None, *, rendezvous: Rendezvous | None):
        self.study = study
        self.rendezvous = rendezvous
        self.dir = Path(templates_dir or study.templates_path or bundled_templates()).resolve()
        self.templates = Templates(study, self.dir)
        self.env = self.templates.env
        name = study.trial.template or DEFAULT_TEMPLATES[study.workload]
        self.template = self.templates.load(name)
        self._ast = self.templates.ast
        self._checkpoint = self.templates.string(study.checkpoint.location) if study.checkpoint.location else None
        self._stamp_labels = {
            labels.STUDY: study.name,
            labels.CRITICAL: "true" if study.critical else "false",
            labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
        }
        # trial shapes that vary (templated replicas or GPUs): one renderer per distinct shape
        self._shape_fields = shape.fields(study)
        self._by_shape: dict[tuple[str, ...], Renderer] = {}
        self._study_context = {} if self._shape_fields else study_context(study)
        # only a duration the study states is an estimate worth planning with, not the default
        self._stamps_expected = "expected_duration" in study.cost.model_fields_set
        self._nonce = secrets.token_hex(4)
        self._gang: tuple[int, ...] | None = None
        # the skeleton: its text in fragments, its documents marshalled, the slots of its holes
        self._compiled: tuple[list[str], bytes, list[tuple[tuple[Any, ...], list[tuple[Any, str]]]]] | None = None
        self._layout: Layout | None = None  # the skeleton's, when it has one
        if rendezvous is not None and not self._shape_fields:
            problems = rendezvous.problems(study)
            if problems:
                raise StudyError(problems)
        if isinstance(self._ast, nodes.Template) and self._per_study(self._ast) and not self._shape_fields:
            self._prepare_skeleton()

    # ------------------------------------------------------------ public

    def render(self, trial: Trial, attempt: int = 0, resume: bool = False) -> list[dict[str, Any]]:
        if self._shape_fields:
            return self._shaped(trial).render(trial, attempt, resume)
        ctx = self._trial_context(trial, attempt, resume)
        if self._compiled is not None:
            return self._fill(ctx)
        docs = self._parse(self.templates.run(self.template, {**self._study_context, **ctx}))
        for path, template in tree.find_holes(docs, self.templates.string):
            tree.set_leaf(docs, path, self.templates.run(template, ctx))
        layout = self._contract(docs)
        values = self._stamp_values(ctx)
        if layout is not None:
            values.update(layout.values(layout.job))
        self._stamp(docs, values, layout)
        spec_digest = digest(docs)
        for labels_map in tree.label_maps(docs):
            labels_map[labels.SPEC_HASH] = spec_digest
        return tree.sharded(docs, ctx["trial"])

    def shape(self, trial: Trial) -> tuple[int, ...]:
        """GPUs of each pod of the trial's gang (what free GPUs must hold for it to start)."""
        if self._shape_fields:
            return self._shaped(trial).shape(trial)
        if self._gang is None:
            self._gang = shape.gang(self.study)
        return self._gang

    def study_for(self, trial: Trial) -> Study:
        """The study as the trial runs it: its shape templates resolved for that trial."""
        return self._shaped(trial).study if self._shape_fields else self.study

    def _shaped(self, trial: Trial) -> Renderer:
        """The renderer of the study resolved to this trial's shape (core/shape.py)."""
        ctx = self._trial_context(trial, 0, False)
        rendered = {path: self.templates.run(self.templates.string(text), ctx) for path, text in self._shape_fields}
        key = tuple(rendered.values())
        renderer = self._by_shape.get(key)
        if renderer is None:
            resolved = shape.resolve(self.study, rendered, f"trial {trial.index} ({trial.name})")
            renderer = self._by_shape[key] = Renderer(resolved, self.dir, rendezvous=self.rendezvous)
        return renderer

    @property
    def states_duration(self) -> bool:
        """Whether the study states its trials' expected duration (not just the default)."""
        return self._stamps_expected

    def expected_seconds(self, trial: Trial) -> float:
        """How long the trial is expected to run: cost.expected_duration, rendered for the
        trial when it is a template."""
        return self._expected(self._trial_context(trial, 0, False))

    def _expected(self, ctx: dict[str, Any]) -> float:
        cost = self.study.cost
        if not cost.per_trial:
            return cost.expected_seconds
        text = self.templates.run(self.templates.string(str(cost.expected_duration)), ctx).strip()
        try:
            return parse_duration(text)
        except ValueError as e:
            raise StudyError(
                [self.study.problem(("cost", "expected_duration"), f"trial {ctx['index']} ({ctx['trial']}): {e}")]
            ) from None

    def render_all(self, trials: Iterable[Trial], attempt: int = 0, resume: bool = False) -> list[list[dict[str, Any]]]:
        """`render` for many trials at once (the collector paused: see space.bulk)."""
        with bulk():
            return [self.render(t, attempt, resume) for t in trials]

    def _fill(self, ctx: dict[str, Any]) -> list[dict[str, Any]]:
        """The per-study fast path: fill the holes of the skeleton; hash from fragments."""
        params = ctx["params"]
        values = {key: ctx[key] for key in self._natives}
        for name in self._param_natives:
            values[f"params.{name}"] = params[name]
        for key, template in self._holes:
            values[key] = self.templates.run(template, ctx)
        values.update(self._stamp_values(ctx))
        if self._layout is not None:
            values.update(self._layout.values(ctx["job"]))
        assert self._compiled is not None  # the fast path runs only with a skeleton
        fragments, skeleton, slots = self._compiled
        encoded = {k: tree.encode(v) for k, v in values.items()}
        parts = fragments.copy()
        parts[1::2] = [encoded[k] for k in self._keys_without]
        values["spec_hash"] = hash_text("".join(parts))
        docs = marshal.loads(skeleton)
        for parent_path, assignments in slots:
            node = docs
            for step in parent_path:
                node = node[step]
            for key, name in assignments:
                node[key] = values[name]
        return tree.sharded(docs, ctx["trial"])

    # ------------------------------------------------------------ templates

    def _per_study(self, ast: nodes.Template) -> bool:
        """Whether the template uses trial-level values only as `{{ x | tojson }}` (and
        includes nothing), so that it can be rendered once per study."""
        if list(meta.find_referenced_templates(ast)):
            return False
        plain: set[int] = set()
        for output in ast.find_all(nodes.Output):
            for expr in output.nodes:
                if isinstance(expr, nodes.Filter) and expr.name == "tojson" and not expr.args:
                    target = expr.node
                    if isinstance(target, nodes.Getattr | nodes.Getitem) and _is_name(target.node, "params"):
                        plain.add(id(target.node))
                    elif isinstance(target, nodes.Name):
                        plain.add(id(target))
        return all(id(n) in plain for n in ast.find_all(nodes.Name) if n.name in TRIAL_VARIABLES)

    def _prepare_skeleton(self) -> None:
        """Render the template once with placeholders: keep the parsed result (marshalled,
        copied per trial, placeholders replaced in place) and its canonical JSON cut at
        the placeholders (joined per trial with the values, for the spec hash)."""
        token = f"@@{self._nonce}:"

        def mark(key: str) -> str:
            return f"{token}{key}@@"

        scalars = TRIAL_VARIABLES - {"params"}
        ctx = {
            **self._study_context,
            **{v: mark(v) for v in scalars},
            "params": {p: mark(f"params.{p}") for p in self.study.space},
        }
        docs = self._parse(self.templates.run(self.template, ctx))
        self._natives: list[str] = []
        self._param_natives: list[str] = []
        self._holes: list[tuple[str, Template | Interpolation]] = []
        for path, value in list(tree.leaves(docs, ())):
            if not isinstance(value, str):
                continue
            if value.startswith(token) and value.endswith("@@") and value.count(token) == 1:
                key = value[len(token) : -2]
                (self._param_natives.append(key[7:]) if key.startswith("params.") else self._natives.append(key))
            elif token in value:  # a placeholder inside a larger string: render per trial
                return
            elif sandbox.is_template(value):
                key = f"hole{len(self._holes)}"
                self._holes.append((key, self.templates.string(value)))
                tree.set_leaf(docs, path, mark(key))
        if any(isinstance(k, str) and token in k for d in docs for k in tree.all_keys(d)):
            return
        self._natives = sorted(set(self._natives))
        self._param_natives = sorted(set(self._param_natives))
        try:
            layout = self._contract(docs)
        except ValueError:  # a count of pods that is a trial's value: render per trial
            return
        if layout is not None and layout.job != mark("job"):  # the workload named otherwise: render per trial
            return
        self._layout = layout
        self._stamp(docs, {k: mark(k) for k in (*stamp.STAMPED, *(layout.keys() if layout else ()))}, layout)
        for labels_map in tree.label_maps(docs):
            labels_map[labels.SPEC_HASH] = mark("spec_hash")
        pattern = re.compile(r'"(' + re.escape(token) + r'[A-Za-z0-9_.]+@@)"')

        def split(text: str) -> tuple[list[str], list[str]]:
            parts = pattern.split(text)
            return parts, [p[len(token) : -2] for p in parts[1::2]]

        fragments, self._keys_without = split(canonical(tree.without_hash(docs)))
        # Where each placeholder sits, grouped by the dict or list that holds it.
        slots: dict[tuple[Any, ...], list[tuple[Any, str]]] = {}
        for path, value in tree.leaves(docs, ()):
            if isinstance(value, str) and value.startswith(token):
                slots.setdefault(path[:-1], []).append((path[-1], value[len(token) : -2]))
        self._compiled = (fragments, marshal.dumps(docs), list(slots.items()))

    def _parse(self, text: str) -> list[dict[str, Any]]:
        try:
            docs = [d for d in yaml.load_all(text, Loader=_YamlLoader) if d is not None]
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            raise StudyError(
                [
                    Problem(
                        self.template.filename or "<template>",
                        mark.line + 1 if mark else None,
                        None,
                        f"the rendered template is not valid YAML: {getattr(e, 'problem', e)}",
                    )
                ]
            ) from e
        bad = [d for d in docs if not isinstance(d, dict) or "kind" not in d or "metadata" not in d]
        if bad or not docs:
            raise StudyError(
                [
                    Problem(
                        self.template.filename or "<template>",
                        None,
                        None,
                        "the template must render Kubernetes objects (mappings with kind and metadata)",
                    )
                ]
            )
        return docs

    # ------------------------------------------------------------ per trial

    def _trial_context(self, trial: Trial, attempt: int, resume: bool) -> dict[str, Any]:
        ctx = {
            "study": self.study.name,
            "namespace": self.study.namespace,
            "trial": trial.name,
            "job": attempt_name(trial, attempt),
            "attempt": attempt,
            "index": trial.index,
            "params": dict(trial.params),
            "resume": resume,
        }
        ctx["checkpoint"] = self.templates.run(self._checkpoint, ctx) if self._checkpoint else ""
        return ctx

    def _stamp_values(self, ctx: dict[str, Any]) -> dict[str, str]:
        return {
            "expected_text": stamp.seconds_text(self._expected(ctx)) if self._stamps_expected else "",
            "trial": ctx["trial"],
            "attempt_text": str(ctx["attempt"]),
            "index_text": str(ctx["index"]),
            "checkpoint": ctx["checkpoint"],
            "resume_text": "1" if ctx["resume"] else "0",
            "params_json": stamp.params_json(ctx["params"]),
        }

    def _stamp(self, docs: list[dict[str, Any]], v: dict[str, str], layout: Layout | None = None) -> None:
        """Stamp the rendezvous contract of `layout` (its values in `v`), then stratctl's
        labels, annotations and env vars on the manifests (core/stamp.py)."""
        if layout is not None:
            layout.stamp(self.study, docs, v)
        stamp.stamp(docs, v, self.study, self._stamp_labels, self._stamps_expected)

    def _contract(self, docs: list[dict[str, Any]]) -> Layout | None:
        """How the trial's pods find each other, as the backend's rendezvous step reads it
        (on Kubernetes: backends/kubernetes/rendering/rendezvous.py), None on a backend that
        runs the attempt itself (it gives its processes the contract its own way)."""
        if self.rendezvous is None:
            return None
        return self.rendezvous.layout(self.study, docs)


# ---------------------------------------------------------------- helpers


def _is_name(node: nodes.Node, name: str) -> bool:
    return isinstance(node, nodes.Name) and node.name == name
