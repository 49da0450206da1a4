"""Writing manifests as YAML that kubectl and people read easily (block style, key
order kept, libyaml's emitter when available)."""

from __future__ import annotations

from collections.abc import Iterable

import yaml

_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump_all(docs: Iterable[dict]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         allow_unicode=True, width=120, explicit_start=True)
