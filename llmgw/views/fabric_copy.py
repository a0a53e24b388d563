"""What the dashboard shows of the fabrics, as data: made on the bastion at apply, read by a router.

The fabrics are parsed from the ibnetdiscover texts in the facts (llmgw.fabric): parsers of
megabytes of text a router has no need to hold (#34). Apply parses them on the bastion and
ships what the dashboard shows in the site copy (llmgw.apply.dashboard_site), beside
`placement.json`:

- `fabrics.json` (`FabricsCopy`): each fabric's line (id, source, counts, its hosts, the
  glance `llmgw status` shows) and which fabrics each inventory node is on, as the bastion's
  map answers it (short host names matched there, by the same rule as the planner's);
- `fabric-<id>.json` (`FabricPage`), one per fabric: its topology as `llmgw fabrics show
  --json` prints it, and its drawing laid out (llmgw.views.fabrics.fabric_drawing). Read
  only when its page, its topology or a node on it is asked for; `fabrics.json` holds its
  SHA-256, so a page file of another apply than the list's is refused, not shown.

Both are input from disk, hostile until checked: every record is validated on read (its
fields, their types, no other keys), an unknown version is refused by name, and what cannot
be read is a note (the list) or an error page (a fabric) saying which file and what to do.

The views ask their questions through `FabricViews` and `FabricMap`, which the bastion
answers live (llmgw.views.fabrics.LiveFabrics, llmgw.fabric.hostmap.HostFabricMap) and a
router from its copy (`CopiedFabrics`), so a page is the same whichever made it.

Why long: both files' whole schema, field by field (each record small), beside the one
reader that checks them: a field the layout or the topology gains is added here once.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, with_config
from typing_extensions import TypedDict

from llmgw.errors import LlmgwError
from llmgw.ibref import find_fabric_id

FABRICS_FILE = "fabrics.json"  # beside hosts.yml in the dashboard's site copy
_NAME = 256
_ID = r"^ib-[0-9a-f]{16}$"  # llmgw.fabric.structure.Fabric.id: a page file's name is made from it


def fabric_file(fabric_id: str) -> str:
    """The name of a fabric's page file in the site copy (the id is checked: it names a file)."""
    if re.fullmatch(_ID, fabric_id) is None:
        raise ValueError(f"not a fabric id: {fabric_id!r}")
    return f"fabric-{fabric_id}.json"


class FabricCopyError(LlmgwError):
    """A fabric's file in the site copy is missing, unreadable or not what apply writes."""


class Glance(Protocol):
    """One fabric in a line (llmgw.fabric.hostmap.FabricGlance)."""

    @property
    def switches(self) -> int: ...
    @property
    def degraded_links(self) -> int: ...
    @property
    def rails(self) -> str: ...


class FabricMap(Protocol):
    """What the glance views (status, nodes, the fleet gauges) ask of the fabrics."""

    @property
    def glances(self) -> Mapping[str, Glance]: ...  # every fabric id -> its glance, in the index's order

    def fabrics_of(self, host: str, /) -> list[str]: ...


class FabricViews(Protocol):
    """What the fabric pages and a node's detail ask of the fabrics."""

    def rows(self) -> list[dict[str, Any]]: ...  # each fabric: id, source, summary, hosts; in id order
    def find(self, ref: str) -> str: ...  # the id `ref` names (llmgw.ibref); FabricError if none
    def topology(self, fabric_id: str) -> dict[str, Any]: ...  # as `llmgw fabrics show --json`
    def drawing(self, fabric_id: str) -> dict[str, Any]: ...  # llmgw.views.fabrics.fabric_drawing
    def adapters(self, host: str) -> list[dict[str, Any]]: ...  # the host's adapter ports, each with its fabric


def overview(topology: Mapping[str, Any]) -> dict[str, Any]:
    """The topology but its switches, hosts, endpoints and cables (llmgw.fabric.Fabric.overview)."""
    return {k: v for k, v in topology.items() if k not in ("switches", "hosts", "endpoints", "links")}


def host_adapters(fabric_id: str, topology: Mapping[str, Any], host: str) -> list[dict[str, Any]]:
    """`host`'s adapter ports in the fabric's topology, each with the fabric's id: the host as
    the fabric names it, else the one of its name before the first dot."""
    hosts = {h["host"]: h["adapters"] for h in topology["hosts"]}
    name = host if host in hosts else next((h for h in hosts if h.split(".")[0] == host), host)
    return [{"fabric": fabric_id, **a} for a in hosts.get(name, ())]


# -- the records --------------------------------------------------------------------

class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RowGlance(_Record):
    switches: int = Field(ge=0)
    degraded_links: int = Field(ge=0)
    rails: str = Field(max_length=_NAME)


class Summary(_Record):
    """llmgw.fabric.Fabric.summary."""
    switches: dict[str, int]  # tier -> how many
    hosts: int = Field(ge=0)
    adapters: int = Field(ge=0)
    links: int = Field(ge=0)
    degraded_links: int = Field(ge=0)
    rails: str = Field(max_length=_NAME)


class FabricRow(_Record):
    id: str = Field(pattern=_ID)
    source: str = Field(max_length=4096)
    summary: Summary
    glance: RowGlance
    hosts: tuple[str, ...] = ()  # every host with an adapter on it, as the fabric names them
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")  # of its page file


class FabricsCopy(_Record):
    version: Literal[1] = 1  # another is refused by name (read_fabrics)
    fabrics: tuple[FabricRow, ...] = ()
    nodes: dict[str, tuple[str, ...]] = Field(default_factory=dict)  # inventory node -> its fabrics' ids
    notes: tuple[str, ...] = ()  # why the fabrics are not known, when they are not

    def to_json(self) -> str:
        return self.model_dump_json(indent=1) + "\n"


# The page file's parts are dicts the template and llmgw.web.fabric_svg read as they are:
# TypedDicts, so pydantic checks each field and key and hands back plain dicts.
_Rate = str | None
_Guid = str | None
_Num = int | float  # a position as the layout made it: 34 stays 34, not 34.0, on the page


@with_config(ConfigDict(extra="forbid"))
class _EndJ(TypedDict):
    kind: str
    name: str
    port: int
    guid: _Guid
    port_guid: _Guid
    host: str | None
    ca: str | None


@with_config(ConfigDict(extra="forbid"))
class _EndpointJ(_EndJ):
    peer: str
    peer_guid: _Guid
    peer_port: int


@with_config(ConfigDict(extra="forbid"))
class _LinkJ(TypedDict):
    a: _EndJ
    b: _EndJ
    width: str
    speed: str
    rate: str
    kind: str
    expected: _Rate
    degraded: bool


@with_config(ConfigDict(extra="forbid"))
class _AdapterJ(TypedDict):
    ca: str
    port: int
    rail: str
    guid: _Guid
    port_guid: _Guid
    lid: int | None
    switch: str | None
    switch_guid: _Guid
    switch_port: int | None
    peer: str
    rate: str
    expected: _Rate
    degraded: bool


@with_config(ConfigDict(extra="forbid"))
class _HostJ(TypedDict):
    host: str
    adapters: list[_AdapterJ]


@with_config(ConfigDict(extra="forbid"))
class _SwitchJ(TypedDict):
    guid: _Guid
    name: str
    tier: str | None
    hops: int | None
    lid: int | None
    ports: int | None


@with_config(ConfigDict(extra="forbid"))
class _SummaryJ(TypedDict):
    switches: dict[str, int]
    hosts: int
    adapters: int
    links: int
    degraded_links: int
    rails: str


@with_config(ConfigDict(extra="forbid"))
class _DegradedJ(TypedDict):
    a: str
    b: str
    rate: str
    expected: _Rate
    kind: str


@with_config(ConfigDict(extra="forbid"))
class _RailsJ(TypedDict):
    status: str
    aligned: bool | None
    misaligned_hosts: list[str]
    reason: str | None
    problems: list[str]


@with_config(ConfigDict(extra="forbid"))
class _TopologyJ(TypedDict):
    """llmgw.fabric.Fabric.to_json."""
    id: str
    source: str
    format: str
    summary: _SummaryJ
    expected_rates: dict[str, str]
    degraded_links: list[_DegradedJ]
    rails: _RailsJ
    notes: list[str]
    switches: list[_SwitchJ]
    hosts: list[_HostJ]
    endpoints: list[_EndpointJ]
    links: list[_LinkJ]


@with_config(ConfigDict(extra="forbid"))
class _TierD(TypedDict):
    tier: str
    y: _Num
    label_y: _Num
    count: int


@with_config(ConfigDict(extra="forbid"))
class _SwitchD(TypedDict):
    key: str
    name: str
    short: str
    tier: str
    guid: _Guid
    hops: int | None
    lid: int | None
    ports: int | None
    x: _Num
    y: _Num
    w: _Num
    h: _Num


@with_config(ConfigDict(extra="forbid"))
class _AdapterD(TypedDict):
    key: str | None
    kind: str
    host: str | None
    ca: str | None
    port: int
    rail: str | None
    colour: str
    degraded: bool
    rate: _Rate
    expected: _Rate
    switch: str | None
    switch_port: int | None
    guid: _Guid
    port_guid: _Guid
    lid: int | None
    label: str
    name: str
    x: _Num
    y: _Num
    w: _Num
    h: _Num


@with_config(ConfigDict(extra="forbid"))
class _CableD(TypedDict):
    a: str
    b: str
    kind: str
    rate: str
    expected: _Rate
    degraded: bool
    colour: str
    x1: _Num
    y1: _Num
    x2: _Num
    y2: _Num
    ports: tuple[int, int]


@with_config(ConfigDict(extra="forbid"))
class _RateD(TypedDict):
    rate: str
    colour: str


@with_config(ConfigDict(extra="forbid"))
class _RailD(TypedDict):
    rail: str
    colour: str


@with_config(ConfigDict(extra="forbid"))
class _DrawingD(TypedDict):
    """llmgw.views.fabrics.fabric_drawing."""
    width: int
    height: int
    tiers: list[_TierD]
    adapter_label_y: _Num
    adapter_row_y: _Num
    switches: list[_SwitchD]
    adapters: list[_AdapterD]
    links: list[_CableD]
    links_not_drawn: int
    hosts: list[str]
    rates: list[_RateD]
    rails: list[_RailD]
    degraded_colour: str


class FabricPage(BaseModel):
    """One fabric's page file: its topology and its drawing."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    id: str = Field(pattern=_ID)
    topology: _TopologyJ
    drawing: _DrawingD

    def to_json(self) -> bytes:
        return self.model_dump_json().encode() + b"\n"



def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc']) or 'the file'}: {first['msg']}"


def read_fabrics(folder: Path) -> tuple[FabricsCopy, str | None]:
    """The `fabrics.json` apply shipped into a router's site copy; when there is none or it
    cannot be read, no fabrics and a note saying which file and what to do."""
    path = folder / FABRICS_FILE
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return FabricsCopy(), (f"fabrics not known here: no {path} (apply maps them on the bastion and ships "
                               "them with the dashboard's site copy: run `llmgw apply`, or `llmgw fabrics` "
                               "on the bastion)")
    except OSError as exc:
        return FabricsCopy(), (f"fabrics not known here: cannot read {path}: {exc.strerror} (the router's "
                               "user must be able to read its site copy)")
    try:
        return FabricsCopy.model_validate_json(text), None
    except ValidationError as exc:
        return FabricsCopy(), (f"fabrics not known here: {path} is not a fabrics list apply writes "
                               f"({_first_error(exc)}); `llmgw apply` replaces it")


def read_fabric_page(folder: Path, row: FabricRow) -> FabricPage:
    """The page file of the fabric `row` lists, checked against the SHA-256 the list holds."""
    path = folder / fabric_file(row.id)
    again = "`llmgw apply` ships it again"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FabricCopyError(f"fabric {row.id} is listed but its page is not here: no {path}", hint=again,
                              fabric=row.id) from None
    except OSError as exc:
        raise FabricCopyError(f"cannot read {path}: {exc.strerror}", fabric=row.id,
                              hint="the router's user must be able to read its site copy") from None
    if hashlib.sha256(data).hexdigest() != row.sha256:
        raise FabricCopyError(f"{path} is not the page {folder / FABRICS_FILE} lists for fabric {row.id} "
                              "(its SHA-256 differs: a copy from another apply, or changed since)",
                              hint=again, fabric=row.id)
    try:
        page = FabricPage.model_validate_json(data)
    except ValidationError as exc:
        raise FabricCopyError(f"{path} is not a fabric page apply writes ({_first_error(exc)})", hint=again,
                              fabric=row.id) from None
    if page.id != row.id or page.topology["id"] != row.id:
        raise FabricCopyError(f"{path} holds fabric {page.id}, not {row.id}", hint=again, fabric=row.id)
    return page


class CopiedFabrics:
    """A router's answers, from its site copy: `FabricMap` from `fabrics.json`, read with the
    site, and `FabricViews`, a fabric's page file read when it is asked for.

    The last KEEP_PAGES pages read are kept: a fabric's page, its topology and its nodes'
    pages are asked one after another, and a node is on one or two fabrics. Not every one:
    a page is plain dicts (52 MB for bench/plan.py's 1,024-host fabric, four times that at
    4,096 hosts), which the router would hold for as long as its copy does not change."""

    KEEP_PAGES = 2

    def __init__(self, copy: FabricsCopy, folder: Path) -> None:
        self.copy, self.folder = copy, folder
        self._rows = {r.id: r for r in copy.fabrics}
        self.glances: dict[str, RowGlance] = {r.id: r.glance for r in copy.fabrics}
        self._pages: dict[str, FabricPage] = {}  # the last read last
        self._lock = threading.Lock()  # pages are asked for from the dashboard's worker threads

    def fabrics_of(self, host: str, /) -> list[str]:
        return list(self.copy.nodes.get(host, ()))

    def rows(self) -> list[dict[str, Any]]:
        return [{"id": r.id, "source": r.source, "summary": r.summary.model_dump(), "hosts": list(r.hosts)}
                for r in self.copy.fabrics]

    def find(self, ref: str) -> str:
        return find_fabric_id(ref, self._rows)

    def page(self, fabric_id: str) -> FabricPage:
        with self._lock:  # one read of a page at a time: two at once would hold both
            page = self._pages.pop(fabric_id, None) or read_fabric_page(self.folder, self._rows[fabric_id])
            self._pages[fabric_id] = page
            while len(self._pages) > self.KEEP_PAGES:
                self._pages.pop(next(iter(self._pages)))
            return page

    def topology(self, fabric_id: str) -> dict[str, Any]:
        return dict(self.page(fabric_id).topology)

    def drawing(self, fabric_id: str) -> dict[str, Any]:
        return dict(self.page(fabric_id).drawing)

    def adapters(self, host: str) -> list[dict[str, Any]]:
        return [a for fid in self.fabrics_of(host) for a in host_adapters(fid, self.page(fid).topology, host)]
