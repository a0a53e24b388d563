"""The NVIDIA host stack a profile may require: `requires: {driver: ">=570", cuda: ">=12.8"}`,
and what its engine's pinned GPU build needs anyway.

A requirement is one or more comma-separated clauses, each an operator (>=, >, <=, <, ==)
and a dotted number ("570", "12.8", "570.133.20"). Versions compare number by number, a
missing trailing part counting as 0 (driver 570.133.20 meets ">=570"). The host's
versions come from gpu_facts (HostFacts.gpu_driver, .cuda_version).

Every GPU profile of an engine with a pinned GPU build (its descriptor's GpuBuild: vLLM's and
SGLang's wheels) also needs what that build needs: the driver family of its CUDA. The host must
meet both the profile's own requirement and the build's; a host that meets neither is told the
stricter one, and the sentence says whose it is and which it was stricter than.

Unknown versions: a host whose version is not known does not meet the profile's own
requirement (the operator asked for proof: unknown is not new enough). The build's needs are
judged only where the version is known: a facts record gathered before gpu_facts reported the
driver would otherwise leave a whole fleet unplaceable after an upgrade of llmgw, and the
engine role refuses a GPU shard on a host whose loaded driver is older anyway
(roles/llmgw_engine/tasks/preflight.yml). CPU profiles (gpus: 0) need nothing of the build.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, field_validator

from llmgw.engines import Engine
from llmgw.facts import HostFacts

_CLAUSE = re.compile(r"^\s*(>=|<=|==|>|<)\s*([0-9]{1,6}(?:\.[0-9]{1,6}){0,3})\s*$")
_OPS: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
# What each requirement is called in a sentence, and the HostFacts field holding the host's version.
WHAT = {"driver": ("NVIDIA driver", "gpu_driver"), "cuda": ("CUDA (as the driver supports it)", "cuda_version")}


def _check(spec: str) -> str:
    clauses = spec.split(",")
    if not spec.strip() or not all(_CLAUSE.match(c) for c in clauses):
        raise ValueError(f"{spec!r} is not a version requirement; write e.g. \">=570\" or \">=12.8,<13\" "
                         "(operators >=, >, <=, <, ==; versions of dotted numbers)")
    return ",".join(c.strip().replace(" ", "") for c in clauses)


class StackRequires(BaseModel):
    """A profile's `requires:` the host's NVIDIA stack must meet; empty: none."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    driver: str | None = None
    cuda: str | None = None

    @field_validator("driver", "cuda")
    @classmethod
    def _valid(cls, v: str | None) -> str | None:
        return None if v is None else _check(v)

    def items(self) -> tuple[tuple[str, str], ...]:
        """(what, requirement) for each one set, in a fixed order: hashable, for the planner's keys."""
        return tuple((k, v) for k in WHAT if (v := getattr(self, k)) is not None)


def version_tuple(text: str) -> tuple[int, ...] | None:
    """"570.133.20" -> (570, 133, 20); None when it does not start with a number."""
    m = re.match(r"^\s*([0-9]+(?:\.[0-9]+)*)", text)
    return None if m is None else tuple(int(p) for p in m.group(1).split("."))


# A fleet runs few driver versions and a catalog asks few requirements, while the planner asks
# every node once per kind of shard: the answers are remembered (both are pure functions of text).
@functools.lru_cache(maxsize=4096)
def meets(version: str, spec: str) -> bool:
    have = version_tuple(version)
    if have is None:
        return False
    for clause in spec.split(","):
        m = _CLAUSE.match(clause)
        assert m is not None, spec  # checked when the catalog was read
        want = tuple(int(p) for p in m.group(2).split("."))
        width = max(len(have), len(want))
        if not _OPS[m.group(1)](have + (0,) * (width - len(have)), want + (0,) * (width - len(want))):
            return False
    return True


@dataclass(frozen=True)
class Requirement:
    """One version requirement on a host's stack: the profile's own (`by` empty) or its engine's
    GPU build's (`by` names the build, `built_for` its CUDA). Hashable: part of the planner's keys."""

    what: str  # a key of WHAT
    spec: str
    by: str = ""  # "vLLM 0.32.0's wheel"; "": the profile's `requires:`
    built_for: str = ""  # the CUDA the build is built against, for the sentence


def requirements(own: StackRequires, engine: Engine, gpus: int) -> tuple[Requirement, ...]:
    """What a profile needs of a host's stack: its `requires:` and, for a GPU profile, what its
    engine's pinned GPU build needs (a driver of its CUDA's family, which reports that CUDA)."""
    out = [Requirement(what, spec) for what, spec in own.items()]
    build = engine.gpu_build
    if gpus > 0 and build is not None:
        name = engine.gpu_build_name()
        out += [Requirement("driver", f">={build.driver}", name, build.cuda),
                Requirement("cuda", f">={build.major}.0", name, build.cuda)]
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _floor(spec: str) -> tuple[int, ...]:
    """The lowest version a requirement admits, as far as its lower bounds say: how strict it is."""
    floors = [tuple(int(p) for p in m.group(2).split(".")) for c in spec.split(",")
              if (m := _CLAUSE.match(c)) is not None and m.group(1) in (">=", ">", "==")]
    return max(floors, default=())


def _host_stack(facts: HostFacts) -> str:
    driver, cuda = facts.gpu_driver, facts.cuda_version
    if driver is not None and cuda is not None:
        return f"driver {driver} supports CUDA {cuda}"
    return f"driver {driver}" if driver is not None else f"its driver supports CUDA {cuda}"


def stack_reason(facts: HostFacts | None, requires: tuple[Requirement, ...]) -> str | None:
    """Why a host's stack does not meet `requires` (requirements()), naming its version; or None."""
    for what, (label, field) in WHAT.items():
        mine = [r for r in requires if r.what == what]
        if not mine:
            continue
        have = getattr(facts, field) if facts is not None else None
        if have is None:
            own = [r for r in mine if not r.by]
            if own:
                return f"{label} version not known, needs {own[0].spec} (run `llmgw facts`; gpu_facts reports it)"
            continue  # the build's needs: judged where known (the module's docstring says why)
        failed = [r for r in mine if not meets(have, r.spec)]
        if not failed:
            continue
        worst = max(failed, key=lambda r: (_floor(r.spec), bool(r.by)))  # the stricter; a tie: the build's
        other = next((r for r in mine if r is not worst), None)
        if worst.by:
            assert facts is not None
            than = f", stricter than the profile's {other.spec}" if other is not None else ""
            short = "driver" if what == "driver" else "CUDA"
            return (f"{_host_stack(facts)}; {worst.by} is built for CUDA {worst.built_for} "
                    f"(needs {short} {worst.spec}{than})")
        than = f" (the profile's, stricter than {other.by}'s {other.spec})" if other is not None else ""
        return f"has {label} {have}, needs {worst.spec}{than}"
    return None
