"""Writing manifests as YAML that kubectl and people read easily (block style, key
order kept, libyaml's emitter when available).

PyYAML quotes only strings its own YAML 1.1 resolver would misread. Go's YAML (what
kubectl reads manifests with) also takes `1e10`, `0x1F`, `0o17` or `.5` as numbers, so a
label value such as the spec hash `123e4567ab` would come back as a number and kubectl
would refuse the manifest. Such strings are quoted explicitly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    _Base = yaml.SafeDumper
else:
    _Base = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

# Anything a YAML 1.1 or 1.2 reader (PyYAML, go-yaml, sigs.k8s.io/yaml) might take for a
# number, boolean or null.
_AMBIGUOUS = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)?\.?[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?0[xX][0-9a-fA-F_]+|[-+]?0[oO]?[0-7_]+|[-+]?0[bB][01_]+
        |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)
        |y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF
        |null|Null|NULL|~|)$""",
    re.VERBOSE,
)


class _Dumper(_Base):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if _AMBIGUOUS.match(value) and any(c.isalnum() or c == "~" for c in value) or value == "":
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="'")
    return dumper.represent_str(value)


_Dumper.add_representer(str, _str)


class _BlockDumper(_Dumper):
    pass


def _block(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:  # a script or another text: its lines as they are, not one escaped string
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return _str(dumper, value)


_BlockDumper.add_representer(str, _block)


def dump_all(docs: Iterable[dict[str, Any]], blocks: bool = False) -> str:
    """`blocks`: strings of several lines as literal blocks (`|`), as a script reads best."""
    return yaml.dump_all(
        docs,
        Dumper=_BlockDumper if blocks else _Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=120,
        explicit_start=True,
    )
