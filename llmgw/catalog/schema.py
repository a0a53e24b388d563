"""The catalog's shape: models, their scaling, their placement profiles, their LoRA
adapters, and weighted routes.

Why long: the whole schema of a catalog entry in one module (each class small), so a
reader sees every key a catalog may hold, and the validators that span them, in one place.

Unknown keys are refused everywhere: a typo (`min_memroy_gb`) must fail loudly
rather than silently mean "no requirement".

Catalog values are data. Anyone who may open a pull request edits the catalog, and
its values travel to Ansible (as `!unsafe` extra vars) and into systemd units, so
every free-text value (`Text`) refuses template syntax (`{{`, `{%`, `{#`) and control
characters, and counts refuse booleans (`gpus: true` is not 1).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import unquote, urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from llmgw.engines import find, names
from llmgw.engines.flags import check_args, check_env_name
from llmgw.stack import StackRequires

NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,62}$"
Name = Annotated[str, Field(pattern=NAME_RE)]
ENV_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"  # what the engine role accepts (llmgw_engine's _llmgw_engine_env_re)
_TEMPLATE = re.compile(r"\{[{%#]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_text(value: str) -> str:
    """Refuse template syntax and control characters in a catalog value (see the module doc)."""
    m = _TEMPLATE.search(value)
    if m:
        raise ValueError(f"contains template syntax {m.group()!r}; catalog values are data, never templates: "
                         "remove it")
    m = _CONTROL.search(value)
    if m:
        raise ValueError(f"contains the control character {m.group()!r}; catalog values are one line of "
                         "printable text: remove it")
    return value


def _no_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is a boolean, not a number; write a number")
    return value


def _engine_arg(value: str, info: ValidationInfo) -> str:
    """One word of a profile's args: not a flag llmgw owns, nor one that widens trust
    (llmgw.engines.flags, in every spelling the engine's parser accepts)."""
    engine = info.data.get("engine")
    if engine is not None:
        for refusal in check_args(str(engine), [value]):
            raise ValueError(refusal.message)
    return value


def _known_engine(name: str) -> str:
    """An engine llmgw.engines has a descriptor for (read at validation: the registry is the list)."""
    if find(name) is None:
        known = [repr(n) for n in names()]
        choices = f"{', '.join(known[:-1])} or {known[-1]}" if len(known) > 1 else known[0]
        raise ValueError(f"{name!r} is not allowed: input should be {choices}")
    return name


def _engine_env(name: str) -> str:
    why = check_env_name(name)
    if why:
        raise ValueError(why)
    return name


Text = Annotated[str, AfterValidator(check_text)]
EngineArg = Annotated[str, AfterValidator(check_text), AfterValidator(_engine_arg)]
EnvName = Annotated[str, Field(pattern=ENV_NAME_RE), AfterValidator(_engine_env)]
Count = Annotated[int, BeforeValidator(_no_bool)]
Number = Annotated[float, BeforeValidator(_no_bool)]
Engine = Annotated[str, AfterValidator(_known_engine)]
# What `llmgw check` verifies (llmgw.probe.checks), and a model may `requires:`.
Capability = Literal["chat", "stream", "completion", "embeddings", "tools", "json"]
CAPABILITIES: tuple[str, ...] = ("chat", "stream", "completion", "embeddings", "tools", "json")
# How the router picks a replica: least in flight, or by prompt prefix so engine prompt
# caches are reused (llmgw/router/balance.py). The state's copy is llmgw.state.Routing.
Routing = Literal["least-load", "prefix-affinity"]

_SCHEME = re.compile(r"^(hf|https?|file)://.+")
_SPACE = re.compile(r"\s")
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


def check_source(v: str) -> str:
    """A weights source llmgw can fetch: hf://, https:// or file:///absolute (models and adapters)."""
    if not _SCHEME.match(v) or _SPACE.search(v):
        raise ValueError(
            f"{v!r} is not a source llmgw can fetch; use hf://org/repo/file, "
            "https://host/path or file:///absolute/path (no spaces)")
    if v.startswith("hf://") and v.isascii():
        # Most sources: urlsplit finds nothing to refuse in an ASCII hf:// location without
        # a port or an IPv6 bracket (a tenth of a 10,000-model catalog's schema time).
        org = v[5:].partition("/")[0]
        if not any(c in org for c in ":[]?#"):
            return v
    try:
        parts = urlsplit(v)
        port = parts.port  # parsing the port is what finds a bad one
    except ValueError as exc:
        raise ValueError(f"{v!r} is not a valid URL ({exc}); check the host and port") from None
    if parts.scheme in ("http", "https") and not parts.hostname:
        raise ValueError(f"{v!r} names no host; write https://host/path")
    if parts.scheme == "file" and (parts.netloc or not parts.path.startswith("/")):
        raise ValueError(f"{v!r}: a file source is file:///absolute/path (three slashes, no host)")
    if parts.scheme == "file" and {".", ".."} & set(unquote(parts.path).split("/")):
        raise ValueError(f"{v!r}: a file source names its file directly; remove the '.' and '..' parts")
    if port == 0:
        raise ValueError(f"{v!r}: port 0 is not a port")
    return v


class Scaling(BaseModel):
    """How many replicas; min 0 means on demand (started by the first request)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    min: Annotated[Count, Field(ge=0, le=10_000)] = 1
    # An omitted max follows min: a catalog that says `min: 2` means exactly two.
    max: Annotated[Count | None, Field(ge=0, le=10_000)] = None
    idle_timeout: int = 1800
    # Demand (llmgw.controller.demand, docs/demand.md): the in-flight requests per replica
    # the controller scales between min and max to keep (none: no autoscaling on load);
    # how long a request for a model with no ready replica is held while one starts; the
    # quiet time after a scale action before the next one up, and before one down.
    target_in_flight: Annotated[Count | None, Field(ge=1, le=100_000)] = None
    activation_timeout: int = 300
    up_cooldown: int = 30
    down_cooldown: int = 300

    @field_validator("idle_timeout", "activation_timeout", "up_cooldown", "down_cooldown", mode="before")
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
    gpus: Annotated[Count, Field(ge=0, le=64)] = 0  # per shard
    nodes: Annotated[Count, Field(ge=1, le=1024)] = 1  # shards; > 1 spans nodes on one fabric
    gpu_class: Text | None = None
    min_memory_gb: Annotated[Number, Field(ge=0, allow_inf_nan=False)] = 0
    node_selector: dict[Text, Text] = Field(default_factory=dict)
    args: list[EngineArg] = Field(default_factory=list)
    env: dict[EnvName, Text] = Field(default_factory=dict)
    # The engine runs the model repository's own Python (`--trust-remote-code`): a key of
    # its own, never an arg, so that review, the plan and policy `auto` see it.
    trust_remote_code: StrictBool = False
    # The host's NVIDIA stack this profile needs (llmgw/stack.py): {driver: ">=570", cuda: ">=12.8"}.
    requires: StackRequires = StackRequires()
    # `bind`: CPUs and memory on its GPUs' NUMA node, when they share one (NUMAPolicy=bind, CPUAffinity=numa).
    numa: Literal["bind", "off"] = "off"
    # Requests one replica of this profile holds at once; beyond it they wait in the router
    # (router/admission.py). None: the router's `max_in_flight`, else the engine's own slots.
    # The router's alone: changing it replaces no replica (planner/spec.py leaves it out).
    max_in_flight: Annotated[Count | None, Field(ge=1, le=65536)] = None

    @model_validator(mode="after")
    def _multi_node_needs_gpus(self) -> Profile:
        engine = find(self.engine)
        if engine is None:  # refused by the field's own validator already
            return self
        if self.nodes > 1 and engine.multi_node == "none":
            raise ValueError(f"nodes: {self.nodes} spans nodes, but {engine.title} serves a model from one "
                             "node only; set nodes: 1")
        # llama.cpp spreads a model over CPU hosts too (its RPC workers are TCP servers).
        if self.nodes > 1 and self.gpus == 0 and engine.multi_node == "fabric":
            raise ValueError(
                f"nodes: {self.nodes} spans nodes but gpus is 0; a multi-node profile needs "
                "gpus per shard (or set nodes: 1)")
        if self.gpu_class is not None and self.gpus == 0:
            raise ValueError("gpu_class is set but gpus is 0; set gpus, or drop gpu_class")
        if self.numa == "bind" and self.gpus == 0:
            raise ValueError("numa: bind follows the shard's GPUs to their NUMA node, but gpus is 0; drop numa")
        if self.trust_remote_code and not engine.remote_code:
            raise ValueError(f"trust_remote_code: {engine.title} runs no code from the model "
                             f"({'/'.join(f.upper() for f in engine.weight_formats)} weights only); remove it")
        return self


class Adapter(BaseModel):
    """A LoRA adapter of a model (docs/adapters.md): served under its own name by the replicas
    of its base whose profiles load it; its weights are fetched beside the base's."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Name
    aliases: list[Name] = Field(default_factory=list)
    source: Annotated[Text, Field(min_length=1)]
    # The base's profiles whose replicas load this adapter; empty: every profile.
    profiles: list[Name] = Field(default_factory=list)
    # How strongly the adapter applies (llama.cpp's per-request scale; 1 is as trained).
    scale: Annotated[Number, Field(gt=0, le=100, allow_inf_nan=False)] = 1.0

    @field_validator("source")
    @classmethod
    def _known_scheme(cls, v: str) -> str:
        return check_source(v)


MAX_ADAPTERS = 256  # per model: more than any engine loads at once at start


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Name
    aliases: list[Name] = Field(default_factory=list)
    source: Annotated[Text, Field(min_length=1)]
    # Whole Hugging Face repositories (hf://org/repo[@revision]) only: which files of the
    # snapshot to fetch (huggingface_hub's allow/ignore patterns, fnmatch style).
    include: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9._*?\[\]/-]{1,200}$")]] = Field(default_factory=list)
    exclude: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9._*?\[\]/-]{1,200}$")]] = Field(default_factory=list)
    fallbacks: list[Name] = Field(default_factory=list)
    scaling: Scaling = Scaling()
    routing: Routing = "least-load"
    # Host labels (llmgw_labels) whose values are failure domains: replicas go to different
    # values when they fit, after different hosts and `llmgw_failure_domain` (planner/placement.py).
    spread: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")]] = Field(default_factory=list)
    profiles: Annotated[list[Profile], Field(min_length=1)]
    # Capabilities apply checks on each new replica (directly, with its engine key) before
    # recording it ready; a replica that fails one stays `starting` and apply stops.
    requires: list[Capability] = Field(default_factory=list)
    # LoRA adapters served on this model's replicas, each under its own name (docs/adapters.md).
    adapters: Annotated[list[Adapter], Field(max_length=MAX_ADAPTERS)] = Field(default_factory=list)
    # How they reach the engines: every one at start (`start`), or `runtime`: none at start, the
    # router loads each on first use and keeps at most `max_loras` on a replica, unloading the
    # least recently used (router/lora.py); for engines that load adapters while serving (vLLM).
    adapter_loading: Literal["start", "runtime"] = "start"
    # With `runtime` (and then required): how many adapters one replica holds at once (vLLM's --max-loras).
    max_loras: Annotated[Count | None, Field(ge=1, le=MAX_ADAPTERS)] = None

    @field_validator("source")
    @classmethod
    def _known_scheme(cls, v: str) -> str:
        return check_source(v)

    @model_validator(mode="after")
    def _patterns_for_repositories(self) -> Model:
        if (self.include or self.exclude) and not re.match(r"^hf://[^/@]+/[^/@]+(@[A-Za-z0-9._-]+)?$", self.source):
            raise ValueError("include/exclude select files of a whole repository (hf://org/repo[@revision]); "
                             f"{self.source!r} names one file")
        return self

    @model_validator(mode="after")
    def _adapters_fit(self) -> Model:
        """Each adapter names profiles the model has, and every profile that loads it runs an
        engine that takes adapters (its descriptor's `adapters`)."""
        by_name = {p.name: p for p in self.profiles}
        seen: set[str] = set()
        for i, a in enumerate(self.adapters):
            if a.name in seen:
                raise ValueError(f"adapters: {a.name!r} is listed twice; each adapter once")
            seen.add(a.name)
            for name in a.profiles:
                if name not in by_name:
                    raise ValueError(f"adapters: {a.name!r} names the profile {name!r}, which this model does not "
                                     f"have; name one of {', '.join(sorted(by_name))}, or drop it")
            for p in adapter_profiles(self, i):
                engine = find(p.engine)
                if engine is not None and engine.adapters == "none":
                    raise ValueError(f"adapters: {a.name!r} would load on profile {p.name!r}, but {engine.title} "
                                     "serves no LoRA adapters; list the profiles that can under the adapter's "
                                     "`profiles:`, or remove the adapter")
        return self

    @model_validator(mode="after")
    def _runtime_loading(self) -> Model:
        """`adapter_loading: runtime` has adapters, a `max_loras`, and engines that load adapters
        while serving on every profile that loads one; `max_loras` means nothing without it."""
        if self.adapter_loading == "start":
            if self.max_loras is not None:
                raise ValueError("max_loras is how many adapters the router keeps loaded on a replica with "
                                 "adapter_loading: runtime; add `adapter_loading: runtime`, or remove max_loras")
            return self
        if not self.adapters:
            raise ValueError("adapter_loading: runtime loads this model's adapters while it serves, but it lists none; "
                             "add adapters, or remove adapter_loading")
        if self.max_loras is None:
            raise ValueError("adapter_loading: runtime needs max_loras: N, how many adapters one replica holds at "
                             "once (the least recently used one is unloaded past it)")
        for i in range(len(self.adapters)):
            for p in adapter_profiles(self, i):
                engine = find(p.engine)
                if engine is not None and engine.lora_api is None:
                    able = ", ".join(n for n in names() if (e := find(n)) is not None and e.lora_api is not None)
                    raise ValueError(f"adapter_loading: runtime, but profile {p.name!r} runs {engine.title}, which "
                                     "llmgw loads adapters into only at start; use adapter_loading: start, or limit "
                                     f"the adapters' `profiles:` to engines that load them while serving ({able})")
        return self

    @model_validator(mode="after")
    def _unique_profiles(self) -> Model:
        seen: set[str] = set()
        for p in self.profiles:
            if p.name in seen:
                raise ValueError(f"profile {p.name!r} is listed twice; profile names must be unique")
            seen.add(p.name)
        return self


def adapter_profiles(model: Model, index: int) -> list[Profile]:
    """The profiles of `model` whose replicas load its adapter number `index`, in catalog order."""
    wanted = model.adapters[index].profiles
    return [p for p in model.profiles if not wanted or p.name in wanted]


def profile_adapters(model: Model, profile: str) -> list[Adapter]:
    """The adapters a replica of `model` on `profile` loads, in catalog order (llama.cpp's ids)."""
    return [a for a in model.adapters if not a.profiles or profile in a.profiles]


# -- weighted routes (docs/routes.md) -----------------------------------------------------
# A served name that splits its traffic between models, for canaries and rollouts: an
# entry with `name` and `routes:` in place of a source and profiles. It runs nothing of
# its own; the router picks a target per API key and conversation (llmgw/router/routes.py).
MAX_ROUTE_TARGETS = 16


def _duration_seconds(value: object) -> float:
    """`max_ttft_p90`: a number of seconds (fractions allowed) or a duration such as 2s."""
    if isinstance(value, bool):
        raise ValueError("true/false is not a duration; write it like 1.5 or 2s")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("ms") and text[:-2].replace(".", "", 1).isdigit():
            return float(text[:-2]) / 1000
        return float(parse_duration(text))
    raise ValueError(f"{value!r} is not a duration; write it like 1.5, 1500ms or 2s")


class RouteTarget(BaseModel):
    """One model a route sends a share of its traffic to."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: Name
    # A whole percentage of the route's traffic. 0 keeps the target in the route with no
    # share (it is still tried after the others when they cannot answer), which is where
    # `llmgw shift` leaves the old model at the end of a rollout.
    weight: Annotated[Count, Field(ge=0, le=100)]


class RouteGuard(BaseModel):
    """When a canary (every target but the largest) breaks a limit over `window`, the router
    sends its share to the stable target (the largest weight) until the route changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # The share of the canary's requests that failed (an engine 5xx or no answer): 0.05 is 5 %.
    max_error_rate: Annotated[Number | None, Field(gt=0, le=1, allow_inf_nan=False)] = None
    # The 90th percentile of the canary's time to first token (streams), in seconds.
    max_ttft_p90: Annotated[float | None, BeforeValidator(_duration_seconds),
                            Field(gt=0, le=3600, allow_inf_nan=False)] = None
    window: Annotated[int, BeforeValidator(parse_duration), Field(ge=1, le=86_400)] = 60
    # Fewer requests than this in the window decide nothing (one failure is not a rate).
    min_requests: Annotated[Count, Field(ge=1, le=1_000_000)] = 20

    @model_validator(mode="after")
    def _some_limit(self) -> RouteGuard:
        if self.max_error_rate is None and self.max_ttft_p90 is None:
            raise ValueError("a guard needs max_error_rate or max_ttft_p90 (or both); add one, or remove the guard")
        return self


class Route(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Name
    aliases: list[Name] = Field(default_factory=list)
    routes: Annotated[list[RouteTarget], Field(min_length=1, max_length=MAX_ROUTE_TARGETS)]
    fallbacks: list[Name] = Field(default_factory=list)
    guard: RouteGuard | None = None

    @model_validator(mode="after")
    def _split(self) -> Route:
        seen: set[str] = set()
        for t in self.routes:
            if t.model in seen:
                raise ValueError(f"routes: {t.model!r} is listed twice; each model once, with its whole share")
            seen.add(t.model)
        total = sum(t.weight for t in self.routes)
        if total != 100:
            raise ValueError(f"routes: the weights add up to {total}, not 100; they are percentages of the "
                             "route's traffic: " + ", ".join(f"{t.model} {t.weight}" for t in self.routes))
        return self

    @property
    def stable(self) -> str:
        """The target with the largest weight (the first listed of equals): where a guard sends
        a failing canary's share."""
        return max(self.routes, key=lambda t: t.weight).model
