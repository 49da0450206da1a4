"""Network topology from Volcano's HyperNodes: which nodes a hard-topology gang may span,
and how many whole gangs the free GPUs hold inside one such group of nodes.

A HyperNode (`topology.volcano.sh/v1alpha1`) is a switch: tier 1 holds nodes, higher tiers
hold HyperNodes. Its `spec.members` are nodes picked by `exactMatch` (a name), `regexMatch`
(a pattern searched in node names) or `labelMatch` (a label selector), or HyperNodes picked
by `exactMatch`. Volcano adds one HyperNode of its own above the tree, a tier higher than
the highest, holding every node; a gang with `highestTierAllowed: T` is placed inside one
HyperNode of tier T or lower, or not at all. So free GPUs count for such a gang only within
the *domains*: the HyperNodes of tier ≤ T that are not inside another one of tier ≤ T.
Pure functions over the dicts the API returns, like `gpus`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from stratctl.run.packing import gangs_fit

TOP = "<cluster>"  # Volcano's implicit HyperNode above all others


@dataclass(frozen=True)
class Domain:
    """A HyperNode a gang may land in whole: its name, tier and nodes."""

    name: str
    tier: int
    nodes: frozenset[str]


def domains(hypernodes: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]], highest_tier: int) -> list[Domain]:
    """The largest HyperNodes of tier ≤ `highest_tier`, each node in one of them at most
    (a node listed under two switches counts in the first by name)."""
    nodes = list(nodes)
    tree = {(h.get("metadata") or {}).get("name", ""): h.get("spec") or {} for h in hypernodes}
    tiers = {name: _tier(spec) for name, spec in tree.items()}
    parents: dict[str, str] = {}
    for name, spec in tree.items():
        for child in _children(spec):
            parents.setdefault(child, name)
    members: dict[str, frozenset[str]] = {}
    for name in tree:
        _real_nodes(name, tree, nodes, members, set())
    top_tier = max([1, *(t + 1 for t in tiers.values())])
    tiers[TOP], members[TOP] = top_tier, frozenset(n["metadata"]["name"] for n in nodes)
    for name in tree:
        parents.setdefault(name, TOP)

    def allowed(name: str) -> bool:
        return tiers[name] <= highest_tier

    chosen: list[Domain] = []
    taken: set[str] = set()
    for name in sorted(n for n in tiers if allowed(n) and not (n in parents and allowed(parents[n]))):
        own = members[name] - taken
        taken |= own
        chosen.append(Domain(name, tiers[name], frozenset(own)))
    return chosen


def gangs_fit_within(free: dict[str, int], shape: list[int], within: list[Domain], limit: int = 10_000) -> int:
    """Whole gangs of `shape` the free GPUs hold with each gang inside one domain."""
    if not any(g > 0 for g in shape):
        return limit  # a gang that needs no GPU is never blocked by GPUs
    total = sum(gangs_fit({n: free[n] for n in d.nodes if n in free}, shape, limit) for d in within)
    return min(total, limit)


def spread(free: dict[str, int], shape: list[int], fit_within: int, highest_tier: int) -> str | None:
    """Why no gang fits although the free GPUs would hold one if the topology allowed it
    (None when that is not the case): what the loop says while it admits nothing."""
    if fit_within > 0 or gangs_fit(free, shape, limit=1) == 0:
        return None
    where = f"tier-{highest_tier} HyperNode" if highest_tier == 1 else f"HyperNode of tier {highest_tier} or below"
    gpus = sum(shape)
    pods = sum(1 for g in shape if g > 0)
    return (
        f"{sum(free.values())} free GPUs are spread over HyperNodes: no {where} holds a whole gang "
        f"({gpus} GPUs on {pods} pod{'s' if pods != 1 else ''})"
    )


def _tier(spec: dict[str, Any]) -> int:
    try:
        return int(spec.get("tier") or 0)
    except (TypeError, ValueError):
        return 0


def _children(spec: dict[str, Any]) -> list[str]:
    return [
        name
        for m in spec.get("members") or []
        if m.get("type") == "HyperNode" and (name := ((m.get("selector") or {}).get("exactMatch") or {}).get("name"))
    ]


def _real_nodes(
    name: str,
    tree: dict[str, dict[str, Any]],
    nodes: list[dict[str, Any]],
    done: dict[str, frozenset[str]],
    visiting: set[str],
) -> frozenset[str]:
    """The nodes under a HyperNode, through its child HyperNodes (a cycle adds nothing)."""
    if name in done:
        return done[name]
    if name in visiting or name not in tree:
        return frozenset()
    visiting.add(name)
    found: set[str] = set()
    for member in tree[name].get("members") or []:
        selector = member.get("selector") or {}
        if member.get("type") == "HyperNode":
            child = (selector.get("exactMatch") or {}).get("name")
            if child:
                found |= _real_nodes(child, tree, nodes, done, visiting)
        elif member.get("type") == "Node":
            found |= node_members(selector, nodes)
    visiting.discard(name)
    done[name] = frozenset(found)
    return done[name]


def node_members(selector: dict[str, Any], nodes: list[dict[str, Any]]) -> set[str]:
    """The node names a member selector picks, as Volcano reads it: an exact name, a regular
    expression found anywhere in the name, or a label selector (an empty one picks none)."""
    picked: set[str] = set()
    exact = (selector.get("exactMatch") or {}).get("name")
    if exact:
        picked.add(exact)
    pattern = (selector.get("regexMatch") or {}).get("pattern")
    if pattern:
        try:
            regex = re.compile(pattern)
        except re.error:
            return set()
        picked |= {n["metadata"]["name"] for n in nodes if regex.search(n["metadata"]["name"])}
    labels = selector.get("labelMatch")
    if labels and (labels.get("matchLabels") or labels.get("matchExpressions")):
        picked |= {n["metadata"]["name"] for n in nodes if _matches(labels, (n["metadata"].get("labels") or {}))}
    return picked


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op, False)
        if not ok:
            return False
    return True
