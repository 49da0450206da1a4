"""The rendered manifests as a tree of dicts and lists: its leaves and the template
strings among them (`find_holes`), setting a leaf, the pod templates inside workloads,
the label maps, every key, the tree without stratctl's hash labels, and one JSON scalar
as the spec hash writes it (`encode`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from jinja2 import Template

from stratctl import labels
from stratctl.core import sandbox


def leaves(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, path + (i,))
    else:
        yield path, node


def find_holes(docs: list[dict[str, Any]], compile_: Any) -> list[tuple[tuple[Any, ...], Template]]:
    return [(p, compile_(v)) for p, v in leaves(docs, ()) if isinstance(v, str) and sandbox.is_template(v)]


def set_leaf(root: Any, path: tuple[Any, ...], value: Any) -> None:
    node = root
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def pods(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pod templates inside workload manifests."""
    pods = []
    for d in docs:
        spec = d.get("spec") or {}
        if d.get("kind") == "Job" and str(d.get("apiVersion", "")).startswith("batch.volcano.sh/"):
            pods += [t["template"] for t in spec.get("tasks") or [] if isinstance(t.get("template"), dict)]
        elif isinstance(spec.get("template"), dict):
            pods.append(spec["template"])
    return pods


def sharded(docs: list[dict[str, Any]], trial: str) -> list[dict[str, Any]]:
    """The shard label on each object (not its pods), after the spec hash: the hash of an
    attempt is the same whichever stratctl version rendered it."""
    shard = labels.shard_of(trial)
    for doc in docs:
        doc["metadata"]["labels"][labels.SHARD] = shard
    return docs


def label_maps(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d["metadata"]["labels"] for d in docs] + [p["metadata"]["labels"] for p in pods(docs)]


def encode(value: Any) -> str:
    """One JSON scalar exactly as `digest.canonical` writes it (ASCII escapes)."""
    if isinstance(value, str):
        return _encode_str(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return int.__repr__(value)
    return _json_float(value)


_encode_str = json.encoder.encode_basestring_ascii  # the C version when available
_json_float = json.JSONEncoder(ensure_ascii=False).encode


def all_keys(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield k
            yield from all_keys(v)
    elif isinstance(node, list):
        for v in node:
            yield from all_keys(v)


def without_hash(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: without_hash(v) for k, v in node.items() if k not in (labels.SPEC_HASH, labels.SHARD)}
    if isinstance(node, list):
        return [without_hash(v) for v in node]
    return node
