"""The catalog's shape: models, their scaling and their placement profiles.

Unknown keys are refused everywhere: a typo (`min_memroy_gb`) must fail loudly
rather than silently mean "no requirement".
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,62}$"
Name = Annotated[str, Field(pattern=NAME_RE)]
Engine = Literal["vllm", "sglang", "llamacpp"]
ENGINES: tuple[str, ...] = ("vllm", "sglang", "llamacpp")

_DURATION_RE = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(value: object) -> int:
    """`30m`, `1h30m`, `90s` or a number of seconds, to seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30m, 1h or 90s")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return value
    if isinstance(value, str):
        m = _DURATION_RE.match(value.strip())
        if m and any(m.groups()):
            h, mi, s = (int(g) if g else 0 for g in m.groups())
            return h * 3600 + mi * 60 + s
    raise ValueError(f"{value!r} is not a duration; write it like 30m, 1h30m or 90s")


def format_duration(seconds: int) -> str:
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s else "")
    return out or "0s"


class Scaling(BaseModel):
    """How many replicas; min 0 means on demand (started by the first request)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    min: Annotated[int, Field(ge=0, le=10_000)] = 1
    # An omitted max follows min: a catalog that says `min: 2` means exactly two.
    max: Annotated[int | None, Field(ge=0, le=10_000)] = None
    idle_timeout: int = 1800

    @field_validator("idle_timeout", mode="before")
    @classmethod
    def _duration(cls, v: object) -> int:
        return parse_duration(v)

    @model_validator(mode="after")
    def _max_follows_min(self) -> Scaling:
        if self.max is None:
            object.__setattr__(self, "max", self.min)
        elif self.max < self.min:
            raise ValueError(f"max: {self.max} is below min {self.min}; raise max or lower min")
        return self

    @property
    def maximum(self) -> int:
        assert self.max is not None
        return self.max


class Profile(BaseModel):
    """One way to run a model; profiles are tried in the order the catalog lists them."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Name
    engine: Engine
    gpus: Annotated[int, Field(ge=0, le=64)] = 0  # per shard
    nodes: Annotated[int, Field(ge=1, le=1024)] = 1  # shards; > 1 spans nodes on one fabric
    gpu_class: str | None = None
    min_memory_gb: Annotated[float, Field(ge=0)] = 0
    node_selector: dict[str, str] = Field(default_factory=dict)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _multi_node_needs_gpus(self) -> Profile:
        # llama.cpp spreads a model over CPU hosts too (its RPC workers are TCP servers).
        if self.nodes > 1 and self.gpus == 0 and self.engine != "llamacpp":
            raise ValueError(
                f"nodes: {self.nodes} spans nodes but gpus is 0; a multi-node profile needs "
                "gpus per shard (or set nodes: 1)")
        if self.gpu_class is not None and self.gpus == 0:
            raise ValueError("gpu_class is set but gpus is 0; set gpus, or drop gpu_class")
        return self


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Name
    aliases: list[Name] = Field(default_factory=list)
    source: Annotated[str, Field(min_length=1)]
    # Whole Hugging Face repositories (hf://org/repo[@revision]) only: which files of the
    # snapshot to fetch (huggingface_hub's allow/ignore patterns, fnmatch style).
    include: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9._*?\[\]/-]{1,200}$")]] = Field(default_factory=list)
    exclude: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9._*?\[\]/-]{1,200}$")]] = Field(default_factory=list)
    fallbacks: list[Name] = Field(default_factory=list)
    scaling: Scaling = Scaling()
    # Host labels (llmgw_labels) whose values are failure domains: replicas go to different
    # values when they fit, after different hosts and `llmgw_failure_domain` (planner/placement.py).
    spread: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")]] = Field(default_factory=list)
    profiles: Annotated[list[Profile], Field(min_length=1)]

    @field_validator("source")
    @classmethod
    def _known_scheme(cls, v: str) -> str:
        if not re.match(r"^(hf|https?|file)://.+", v):
            raise ValueError(
                f"{v!r} is not a source llmgw can fetch; use hf://org/repo/file, "
                "https://host/path or file:///absolute/path")
        return v

    @model_validator(mode="after")
    def _patterns_for_repositories(self) -> Model:
        if (self.include or self.exclude) and not re.match(r"^hf://[^/@]+/[^/@]+(@[A-Za-z0-9._-]+)?$", self.source):
            raise ValueError("include/exclude select files of a whole repository (hf://org/repo[@revision]); "
                             f"{self.source!r} names one file")
        return self

    @model_validator(mode="after")
    def _unique_profiles(self) -> Model:
        seen: set[str] = set()
        for p in self.profiles:
            if p.name in seen:
                raise ValueError(f"profile {p.name!r} is listed twice; profile names must be unique")
            seen.add(p.name)
        return self
