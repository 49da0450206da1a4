"""Pod fields a real trial needs: volumes and their mounts, node affinity, image pull
secrets, environment from secrets and config maps, and a security context.

Written in the study's snake_case; `manifest()` of each gives the Kubernetes camelCase the
templates render. Anything not here can still be reached with a custom template.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from stratctl.core.model import Model, dns_label, invalid

_SOURCES = ("pvc", "empty_dir", "config_map", "secret")


class PvcSource(Model):
    claim: str
    read_only: bool = False


class EmptyDirSource(Model):
    medium: str = ""  # "" (node disk) or "Memory" (tmpfs, e.g. for /dev/shm)
    size_limit: str | None = None

    @field_validator("medium")
    @classmethod
    def _medium(cls, v: str) -> str:
        if v not in ("", "Memory"):
            raise invalid("medium", "medium must be 'Memory' or left out (node disk), got {v!r}", v=v)
        return v


class NamedSource(Model):
    """A config map or a secret mounted as files."""

    name: str
    optional: bool | None = None


class Volume(Model):
    """One pod volume: a name and exactly one source."""

    name: str
    pvc: PvcSource | None = None
    empty_dir: EmptyDirSource | None = None
    config_map: NamedSource | None = None
    secret: NamedSource | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return dns_label(v, "volume name")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        given = [s for s in _SOURCES if getattr(self, s) is not None]
        if len(given) != 1:
            raise invalid(
                "volume_source",
                "volume {name!r} needs exactly one source of {choices}; got {n}",
                name=self.name,
                choices=", ".join(_SOURCES),
                n=", ".join(given) if given else "none",
            )
        return self

    def manifest(self) -> dict[str, Any]:
        if self.pvc is not None:
            source: dict[str, Any] = {"persistentVolumeClaim": {"claimName": self.pvc.claim}}
            if self.pvc.read_only:
                source["persistentVolumeClaim"]["readOnly"] = True
        elif self.empty_dir is not None:
            d = self.empty_dir
            source = {"emptyDir": {k: v for k, v in (("medium", d.medium), ("sizeLimit", d.size_limit)) if v}}
        elif self.config_map is not None:
            source = {"configMap": _named(self.config_map)}
        else:
            assert self.secret is not None
            named = _named(self.secret)
            source = {"secret": {"secretName": named.pop("name"), **named}}
        return {"name": self.name, **source}


def _named(s: NamedSource) -> dict[str, Any]:
    return {"name": s.name, **({"optional": s.optional} if s.optional is not None else {})}


class VolumeMount(Model):
    name: str
    mount_path: str
    read_only: bool = False
    sub_path: str | None = None

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise invalid("mount_path", "mount_path must be an absolute path (starting with '/'), got {v!r}", v=v)
        return v

    def manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "mountPath": self.mount_path}
        if self.read_only:
            out["readOnly"] = True
        if self.sub_path:
            out["subPath"] = self.sub_path
        return out


class EnvFrom(Model):
    """All keys of one secret or config map as environment variables."""

    secret: str | None = None
    config_map: str | None = None
    prefix: str | None = None

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.secret is None) == (self.config_map is None):
            raise invalid("env_from", "env_from entries need exactly one of 'secret' or 'config_map'")
        return self

    def manifest(self) -> dict[str, Any]:
        ref = {"secretRef": {"name": self.secret}} if self.secret else {"configMapRef": {"name": self.config_map}}
        return {**({"prefix": self.prefix} if self.prefix else {}), **ref}


class NodeAffinity(Model):
    """Node labels a trial's pods need (`required`: any listed value) or prefer (`preferred`)."""

    required: dict[str, list[str]] = {}
    preferred: dict[str, list[str]] = {}

    @field_validator("required", "preferred", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> Any:
        # `gpu-type: a100` means `gpu-type: [a100]`
        if isinstance(v, dict):
            return {k: [x] if isinstance(x, str) else x for k, x in v.items()}
        return v

    def manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.required:
            # one term with every expression: all labels required (ANDed), any of each one's values
            out["requiredDuringSchedulingIgnoredDuringExecution"] = {
                "nodeSelectorTerms": [{"matchExpressions": [_expression(k, v) for k, v in self.required.items()]}]
            }
        if self.preferred:
            out["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": 1, "preference": {"matchExpressions": [_expression(k, v)]}}
                for k, v in self.preferred.items()
            ]
        return out


def _expression(key: str, values: list[str]) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": values}


class Affinity(Model):
    node: NodeAffinity = NodeAffinity()

    def manifest(self) -> dict[str, Any]:
        node = self.node.manifest()
        return {"nodeAffinity": node} if node else {}


class SecurityContext(Model):
    """The pod security context, in snake_case (rendered as Kubernetes' camelCase)."""

    run_as_user: int | None = Field(default=None, ge=0)
    run_as_group: int | None = Field(default=None, ge=0)
    run_as_non_root: bool | None = None
    fs_group: int | None = Field(default=None, ge=0)
    supplemental_groups: list[int] | None = None

    def manifest(self) -> dict[str, Any]:
        return {_camel(k): v for k, v in self.model_dump(exclude_none=True).items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def undefined_mounts(mounts: list[VolumeMount], volumes: set[str], where: str) -> tuple[str, str] | None:
    """The (field, name) of the first mount naming no volume of the trial."""
    for i, m in enumerate(mounts):
        if m.name not in volumes:
            return f"{where}.{i}.name", m.name
    return None
