"""What an engine is, in one place: a frozen `Engine` per engine, and the registry of them.

Each engine module (llamacpp.py, vllm.py, sglang.py) builds its own `ENGINE`; the
package registers them. Everything that once kept a table of its own reads the
descriptor instead: the catalog's schema (which engines, multi-node, remote code), the
router (the OpenAI endpoints each engine serves, and where), the weights browser (which
formats each takes), apply (what hosts install), the probe (pinned versions) and the
role's preflight (the owned and trust-widening flags). The role's variables and the
collection's fact module cannot import llmgw: tests/engines/test_descriptor.py checks that
they say what the descriptors say. docs/engines.md: how to add an engine.

This module imports only the standard library and llmgw.engines.shard: the router
imports it, and its import closure is pinned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from llmgw.engines.shard import Layout, Shard

Install = Literal["venv", "binary"]
"""venv: a pinned Python distribution in a virtualenv of its own on the host (built offline
from an archive of wheels apply makes); binary: programs the operator builds and apply
copies (llama.cpp's `llmgw_engine_llamacpp_artifact`)."""

MultiNode = Literal["none", "fabric", "tcp"]
"""none: one node per replica; fabric: ranks meet over NCCL on one InfiniBand fabric, GPUs
required; tcp: rank 0 reaches its workers over TCP on their management addresses (CPU too)."""

Adapters = Literal["none", "static", "runtime"]
"""LoRA adapters: none; static (named on the command line at start); runtime (loaded and
unloaded through the engine's own API while it serves)."""

KeyHandling = Literal["env", "config"]
"""How the engine reads its API key: from an environment variable (in the unit's root-only
EnvironmentFile), or from a file of options handed to the unit by LoadCredential=."""

WEIGHT_FORMATS: tuple[str, ...] = ("gguf", "safetensors", "pytorch")
"""The weight formats llmgw tells apart (llmgw.weights.browse names each file by one)."""

Parser = Literal["argparse", "flexible", "exact"]
"""How the engine's parser reads an option word: argparse (prefixes, `--flag=value`);
flexible (vLLM's FlexibleArgumentParser: argparse plus `--a_b` and `--a.key`); exact words."""

Flags = Mapping[str, tuple[str, str]]  # option string -> (owned | trust, what it is): llmgw.engines.flags

# The lowest NVIDIA driver that runs a program built with any CUDA of a major release, under
# NVIDIA's minor-version compatibility ("CUDA 13.x: >= 580, CUDA 12.x: >= 525, CUDA 11.x: >= 450",
# https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html, table 1).
# This floor, not the toolkit's own release driver (580.65.06 for 13.0), because the pinned
# wheels carry their CUDA libraries (the nvidia-* wheels) and compiled kernels, so only the
# driver's major family binds: a 12.x build measured running on a driver that reports 12.2,
# a 13.0 build refusing to start there (eullm/eullm#428). The toolkit's own number would turn
# away only pre-release drivers of the same branch.
MIN_DRIVER: Mapping[int, str] = {11: "450", 12: "525", 13: "580"}


@dataclass(frozen=True)
class GpuBuild:
    """What an engine's pinned GPU build needs of a host's NVIDIA stack (llmgw.stack applies it
    to every GPU profile of the engine; the engine role refuses an older driver)."""

    kind: str  # what a sentence calls the build: "wheel"
    cuda: str  # the CUDA version it is built against, "13.0"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[0-9]+\.[0-9]+", self.cuda) or self.major not in MIN_DRIVER:
            raise ValueError(f"GPU build for CUDA {self.cuda!r}: write MAJOR.MINOR of a CUDA release "
                             f"llmgw knows the driver floor of ({', '.join(f'{m}.x' for m in MIN_DRIVER)})")

    @property
    def major(self) -> int:
        return int(self.cuda.split(".")[0])

    @property
    def driver(self) -> str:
        """The lowest driver that runs it (MIN_DRIVER of its CUDA major release)."""
        return MIN_DRIVER[self.major]


@dataclass(frozen=True)
class Engine:
    """Everything llmgw needs to know about one engine (docs/engines.md lists each answer)."""

    name: str  # as the catalog's `engine:` spells it
    title: str  # as people spell it ("vLLM")
    command: Callable[[Shard, Layout], list[str]]  # the shard's ExecStart, word by word
    install: Install
    # venv: the PyPI distribution (and extras) per host kind: GPU hosts, CPU hosts. The
    # version is `version`; binary engines have none (the build is the operator's).
    distribution: tuple[str, str] | None
    version: str  # pinned ("" for a binary: its version is what the build reports)
    programs: tuple[str, ...]  # binary: what apply copies from the build, the first prints --version
    flags: Flags  # options a catalog's args may not set (llmgw.engines.flags)
    parser: Parser
    key: KeyHandling
    key_env: str  # the variable holding the key, for key == "env"
    endpoints: Mapping[str, str]  # OpenAI endpoint key ("POST /v1/chat/completions") -> the engine's path
    weight_formats: tuple[str, ...]
    multi_node: MultiNode
    remote_code: bool  # may run the model repository's own code (`trust_remote_code: true`)
    # What the pinned GPU build needs of the host's NVIDIA stack; None where there is no pinned
    # GPU build (a binary engine: the operator builds it, and a profile's `requires:` says
    # what that build needs). Required of every engine so that none forgets it.
    gpu_build: GpuBuild | None
    adapters: Adapters = "none"
    # The engine's own paths the router loads and unloads adapters through (POST {lora_name,
    # lora_path} / {lora_name}), for a model's `adapter_loading: runtime` (router/lora.py); empty:
    # llmgw loads adapters on it only at start. And the environment that turns that API on, set
    # in such a model's units (llmgw.engines.environment), as (name, value) pairs.
    lora_api: tuple[str, str] | None = None
    runtime_lora_env: tuple[tuple[str, str], ...] = ()
    # Options of the parser that are a prefix of a refused one but are tuning themselves
    # (argparse takes an exact option before a prefix): never refused.
    tuning_prefixes: frozenset[str] = frozenset()
    # Requests a replica runs at once by its command line (the catalog's args, GPUs per shard,
    # shards, its first GPU as the facts describe it: llmgw.engines.flags.Device), as apply
    # records it for the router's admission; None: the engine says it itself (llama.cpp's
    # /props, router/slots.py) or nothing before the start can.
    max_running: Callable[[Sequence[str], int, int, Any], int | None] | None = None
    health: str = "/health"  # GET: 200 once the model is loaded (the role's wait, the router's checks)

    def __post_init__(self) -> None:
        if (self.install == "venv") != (self.distribution is not None and bool(self.version)) \
                or (self.install == "binary") != bool(self.programs):
            raise ValueError(f"engine {self.name}: a venv engine has a distribution and a version, "
                             "a binary one programs instead")
        if self.install == "venv" and self.gpu_build is None:
            raise ValueError(f"engine {self.name}: a venv engine installs a pinned GPU build ({self.distribution}); "
                             "say what it needs of the host (gpu_build=GpuBuild(kind, cuda))")
        if self.key == "env" and not self.key_env:
            raise ValueError(f"engine {self.name}: key 'env' needs key_env")
        unknown = set(self.weight_formats) - set(WEIGHT_FORMATS)
        if unknown:
            raise ValueError(f"engine {self.name}: unknown weight formats {sorted(unknown)} "
                             f"(known: {', '.join(WEIGHT_FORMATS)})")

    def requirement(self, gpus: bool) -> str:
        """The pip requirement a host installs: the GPU or CPU build, at the pinned version."""
        if self.distribution is None:
            raise ValueError(f"{self.name!r} is not a Python engine ({', '.join(python_engines())})")
        return f"{self.distribution[0 if gpus else 1]}=={self.version}"

    def gpu_build_name(self) -> str:
        """How a sentence names the pinned GPU build: "vLLM 0.32.0's wheel"."""
        if self.gpu_build is None:
            raise ValueError(f"{self.name!r} has no pinned GPU build")
        return f"{self.title} {self.version}'s {self.gpu_build.kind}"


_REGISTRY: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    """Add an engine (llmgw.engines does, for each of its modules); a name is taken once."""
    if engine.name in _REGISTRY and _REGISTRY[engine.name] is not engine:
        raise ValueError(f"engine {engine.name!r} is registered already")
    _REGISTRY[engine.name] = engine
    return engine


def unregister(name: str) -> None:
    """Take an engine out again (tests that register one of their own)."""
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """The registered engines, in the order they were registered."""
    return tuple(_REGISTRY)


def find(name: str) -> Engine | None:
    return _REGISTRY.get(name)


def get(name: str) -> Engine:
    """The engine called `name`; a ValueError naming the known ones otherwise."""
    found = _REGISTRY.get(name)
    if found is None:
        raise ValueError(f"unknown engine {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    return found


def engines() -> tuple[Engine, ...]:
    return tuple(_REGISTRY.values())


def python_engines() -> tuple[str, ...]:
    """The engines hosts install as virtualenvs."""
    return tuple(e.name for e in _REGISTRY.values() if e.install == "venv")


def for_format(fmt: str) -> tuple[str, ...]:
    """The engines that load weights of this format."""
    return tuple(e.name for e in _REGISTRY.values() if fmt in e.weight_formats)


__all__ = ["MIN_DRIVER", "WEIGHT_FORMATS", "Adapters", "Engine", "GpuBuild", "Install", "KeyHandling", "MultiNode",
           "Parser", "engines", "find", "for_format", "get", "names", "python_engines", "register", "unregister"]
