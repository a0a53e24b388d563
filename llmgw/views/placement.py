"""What the views show of a plan: the models it cannot place, and why — as data, not a planner.

A view on the bastion (`llmgw status`, `models`) plans with the planner itself
(llmgw.views.planned); a router's dashboard cannot: the router process never imports the
planner (#34). Apply plans on the bastion and ships the result in the dashboard's site copy
as `placement.json` (llmgw.apply.dashboard_site), and the router reads it here. The records
are the planner's own `Unplaced` entries (llmgw.planner.schema) field for field, so both
sides render them with the same view code.

The file is read like every input: a missing file, a wrong shape or an unknown version is
a note naming the file and what to do, and the dashboard shows nothing as unplaceable
rather than guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PLACEMENT_FILE = "placement.json"  # beside hosts.yml in the dashboard's site copy
_LINE = 256
_PROSE = 65536


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Rejection(_Record):
    profile: str = Field(max_length=_LINE)
    node: str | None = Field(default=None, max_length=_LINE)
    fabric: str | None = Field(default=None, max_length=_LINE)
    reason: str = Field(max_length=_PROSE)


class NotMoved(_Record):
    replica: str = Field(max_length=_LINE)
    code: str = Field(max_length=_LINE)
    reason: str = Field(max_length=_PROSE)


class Unplaced(_Record):
    """A model the plan places fewer replicas of than it wants, or could not move a replica of."""
    model: str = Field(max_length=_LINE)
    wanted: int = Field(ge=0)
    placed: int = Field(ge=0)
    rejections: tuple[Rejection, ...] = ()
    not_moved: tuple[NotMoved, ...] = ()


@dataclass(frozen=True)
class Held:
    """Whose weights are where (views.held): judged on the bastion by the planner's rule."""
    nodes_of: dict[str, list[str]]  # model -> the nodes holding its weights, in name order
    at: dict[str, dict[str, list[str]]]  # node -> path of the weights there -> the models served from it


class Pin(_Record):
    """What `catalog validate` recorded of a model's source (None: not inspected yet, or unsaid)."""
    commit: str | None = Field(default=None, max_length=_LINE)
    size_bytes: int | None = Field(default=None, ge=0)


class Placement(_Record):
    """The plan's `unplaced`, and what the views must say about it. No serial or time: the
    routers' site copy is sent again only when its bytes change (llmgw_router's check.yml),
    so it holds what changes when the placement does, not every apply."""
    version: Literal[1] = 1  # another is refused by name (read_placement)
    unplaced: tuple[Unplaced, ...] = ()
    notes: tuple[str, ...] = ()  # why this is not what `llmgw plan` would say, when it is not
    # Of the drains (views.status.drains): replicas the plan moves off a draining node, and
    # those it destroys because their drain's deadline passed.
    moving: tuple[str, ...] = ()
    destroyed_at_deadline: tuple[str, ...] = ()
    # Whose weights are where, by the planner's rule (views.held): model -> the nodes holding
    # them; node -> path there -> the models served from it.
    weights_nodes: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    weights_at: dict[str, dict[str, tuple[str, ...]]] = Field(default_factory=dict)
    # model -> its source's pinned commit and weights size (views.models)
    pins: dict[str, Pin] = Field(default_factory=dict)
    # model -> its weights cache entry (llmgw.weights.names.cache_name of its source), for a
    # replica the state has no entry of (views.replicas): the router holds no naming rule
    cache_names: dict[str, str] = Field(default_factory=dict)

    def held(self) -> Held:
        return Held({m: list(ns) for m, ns in self.weights_nodes.items()},
                    {n: {path: list(ms) for path, ms in at.items()} for n, at in self.weights_at.items()})

    def to_json(self) -> str:
        return self.model_dump_json(indent=1) + "\n"


def unknown_placement(why: str) -> Placement:
    """No placement to show: nothing is listed as unplaceable, and the note says why."""
    return Placement(notes=(why,))


def read_placement(folder: Path) -> Placement:
    """The `placement.json` apply shipped into a router's site copy. None there, or one that
    cannot be read, is a placement nobody knows, with a note saying why and what to do: a
    dashboard page shows it rather than failing."""
    path = folder / PLACEMENT_FILE
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return unknown_placement(f"what cannot be placed is not known here: no {path} (apply plans it on the "
                                 "bastion and ships it with the dashboard's site copy: run `llmgw apply`, "
                                 "or `llmgw status` on the bastion)")
    except OSError as exc:
        return unknown_placement(f"what cannot be placed is not known here: cannot read {path}: {exc.strerror} "
                                 "(the router's user must be able to read its site copy)")
    try:
        return Placement.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        return unknown_placement(f"what cannot be placed is not known here: {path} is not a placement "
                                 f"apply writes ({where}: {first['msg']}); `llmgw apply` replaces it")
