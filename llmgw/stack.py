"""The NVIDIA host stack a profile may require: `requires: {driver: ">=570", cuda: ">=12.8"}`.

A requirement is one or more comma-separated clauses, each an operator (>=, >, <=, <, ==)
and a dotted number ("570", "12.8", "570.133.20"). Versions compare number by number, a
missing trailing part counting as 0 (driver 570.133.20 meets ">=570"). The host's
versions come from gpu_facts (HostFacts.gpu_driver, .cuda_version); a host whose version
is not known does not meet a requirement (unknown is not new enough).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, field_validator

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


def stack_reason(facts: HostFacts | None, requires: tuple[tuple[str, str], ...]) -> str | None:
    """Why a host's stack does not meet `requires` (StackRequires.items()), naming its version; or None."""
    for what, spec in requires:
        label, field = WHAT[what]
        have = getattr(facts, field) if facts is not None else None
        if have is None:
            return f"{label} version not known, needs {spec} (run `llmgw facts`; gpu_facts reports it)"
        if not meets(have, spec):
            return f"has {label} {have}, needs {spec}"
    return None
