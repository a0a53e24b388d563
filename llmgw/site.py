"""A site: the folder an operator commits, holding `llmgw.yaml`, a catalog and an inventory.

`llmgw.yaml` names where everything lives; every path in it is relative to the site
folder, and every key has a default so an empty file is a valid site.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from llmgw.catalog import parse_duration
from llmgw.errors import LlmgwError, SiteError
from llmgw.nodetime import check_intervals
from llmgw.yamlio import line_of, load_yaml

SITE_FILE = "llmgw.yaml"
# How long a node's facts stay stale (no gathering reaches it) before it is unreachable, and
# before it is lost (llmgw.nodetime); llmgw.yaml's unreachable_after and lost_after, in seconds.
UNREACHABLE_AFTER = 5 * 60
LOST_AFTER = 30 * 60

Duration = Annotated[int, BeforeValidator(parse_duration)]  # 30m, 1h30m, 90s or seconds


class PortRange(BaseModel):
    """Ports handed to engine shards; a shard keeps its port across plans."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    start: Annotated[int, Field(ge=1024, le=65535)] = 20000
    end: Annotated[int, Field(ge=1024, le=65535)] = 20999

    @model_validator(mode="after")
    def _ordered(self) -> PortRange:
        if self.end < self.start:
            raise ValueError(f"end {self.end} is below start {self.start}")
        return self


class SiteConfig(BaseModel):
    """The contents of `llmgw.yaml`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    catalog: str = "catalog"
    inventory: str = "inventory"
    state: str = "state.json"
    facts: str = "facts"
    ports: PortRange = PortRange()
    # Key, quota and usage store: sqlite:///path or postgresql://...; default a SQLite
    # file beside the state.
    store: str | None = None
    # A Prometheus the dashboard may draw charts from (the router keeps no history).
    prometheus: str | None = None
    # Where the engine binaries come from on this control host (llama-server artifact).
    engine_artifacts: str | None = None
    # A Hugging Face-compatible endpoint (an air-gapped site's mirror) that hosts fetch hf://
    # sources from and `catalog validate` sizes them with; https://huggingface.co when unset.
    # The HF token goes only there; plain http only for a mirror named here.
    mirror: str | None = None
    # A recorded site (the example): its facts were recorded elsewhere and its inventory
    # names hosts that are not the operator's, so every verb that would contact hosts
    # refuses. Plan, explain and the views work on it as on any site.
    recorded: bool = False
    # The hosts' SSH keys: `llmgw facts` records a host's key on first contact (trust on first
    # use), and every Ansible run and tunnel checks against this file strictly. Commit it (or
    # pin the keys in it yourself); the lab writes its own.
    known_hosts: str = "known_hosts"
    # A node whose facts stay stale this long is unreachable: no new replica goes there; after
    # lost_after, plans replace its replicas elsewhere and drop them from the state unreached.
    unreachable_after: Duration = UNREACHABLE_AFTER
    lost_after: Duration = LOST_AFTER

    @model_validator(mode="after")
    def _intervals(self) -> SiteConfig:
        problem = check_intervals(self.unreachable_after, self.lost_after)
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("prometheus")
    @classmethod
    def _prometheus_url(cls, v: str | None) -> str | None:
        # Only ever asked for /api/v1/query_range below this URL (llmgw.web.history).
        if v is None:
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password \
                or parts.query or parts.fragment or any(ord(c) < 0x21 or c == "\x7f" for c in v):
            raise ValueError(f"{v!r} is not a Prometheus URL; use http(s)://HOST[:PORT][/PATH], without "
                             "credentials, query or fragment")
        return v.rstrip("/")

    @field_validator("known_hosts")
    @classmethod
    def _known_hosts_path(cls, v: str) -> str:
        problem = known_hosts_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("mirror")
    @classmethod
    def _mirror_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password \
                or parts.query or parts.fragment or any(ord(c) < 0x21 or c == "\x7f" for c in v):
            raise ValueError(f"{v!r} is not a mirror URL; use http(s)://HOST[:PORT][/PATH], without credentials")
        return v.rstrip("/")


def known_hosts_problem(path: str) -> str | None:
    """Why ssh cannot be given `path` as its known-hosts file, or None. ssh splits the value
    of UserKnownHostsFile at whitespace and expands `%` and `~` in it."""
    if not path or any(c.isspace() or c in '%"\'' or ord(c) < 0x20 or c == "\x7f" for c in path):
        return (f"{path!r} cannot be ssh's known-hosts file: use a path without spaces, quotes, '%' or "
                "control characters")
    return None


class Site:
    """A site folder with its configuration resolved to absolute paths."""

    def __init__(self, root: Path, config: SiteConfig, *, lines: dict[str, int] | None = None,
                 runtime: Path | None = None, facts: Path | None = None) -> None:
        self.root = root
        self.config = config
        self.lines = lines or {}  # top-level key -> its line in llmgw.yaml (for errors)
        # The controller's own runtime folder (llmgw.controller.checkout): when set, the local
        # state (or a PostgreSQL state's last copy), the engine key secret beside it, the runs
        # and the default store live there, never in the site folder, which is then only a
        # checkout of a commit; `state:` keeps naming the backend (a file, or PostgreSQL).
        self.runtime = runtime
        self._facts = facts  # facts gathered outside a checkout that holds none (the controller's)

    @classmethod
    def load(cls, root: Path, *, runtime: Path | None = None, facts: Path | None = None) -> Site:
        root = root.resolve()
        if not root.is_dir():
            raise SiteError(f"{root} is not a folder", hint="pass an existing site folder to -C")
        path = root / SITE_FILE
        if not path.is_file():
            raise SiteError(
                f"no {SITE_FILE} in {root}",
                hint=f"run llmgw in a site folder, pass -C DIR, or create one with `llmgw init {root}`",
            )
        data = load_yaml(path, plain=True) or {}
        if not isinstance(data, dict):
            raise SiteError(f"{path}:{line_of(data, [])}: expected a mapping of settings at the top")
        try:
            config = SiteConfig.model_validate(data)
        except ValidationError as exc:
            lines = [f"{path}:{line_of(data, list(e['loc']))}: {'.'.join(str(p) for p in e['loc'])}: "
                     f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors()]
            raise SiteError(lines[0] if len(lines) == 1 else f"{path} is invalid", detail=lines[len(lines) == 1:],
                            hint="correct the keys above; see `llmgw init` for a commented example") from None
        return cls(root, config, lines={str(k): line_of(data, [k]) for k in data},
                   runtime=runtime.resolve() if runtime is not None else None, facts=facts)

    def require_live(self, verb: str) -> None:
        """Refuse `verb` (a command that contacts hosts) on a recorded site."""
        if self.config.recorded:
            where = f"{self.root / SITE_FILE}:{self.lines.get('recorded', 0)}"
            raise SiteError(f"{where}: this is a recorded site (recorded: true): `llmgw {verb}` would contact "
                            "its hosts, which are not a fleet of yours",
                            hint="plan, explain and the views work here; for a real fleet, copy the site, "
                                 "point its inventory at your hosts and remove `recorded: true`")

    def path(self, rel: str) -> Path:
        return (self.root / rel).resolve()

    @property
    def catalog_dir(self) -> Path:
        return self.path(self.config.catalog)

    @property
    def inventory(self) -> Path:
        return self.path(self.config.inventory)

    @property
    def state_file(self) -> Path:
        """The state file; with `state: postgresql://...`, the last copy read from PostgreSQL (what
        routers are sent, kept in `.llmgw/` of the site). llmgw.state.select.backend_for opens the backend.
        With a runtime folder, `state.json` there in both cases."""
        if self.runtime is not None:
            return self.runtime / "state.json"
        if self.config.state.startswith(("postgresql://", "postgres://")):
            return self.root / ".llmgw" / "state.json"
        return self.path(self.config.state)

    @property
    def facts_dir(self) -> Path:
        own = self.path(self.config.facts)
        return self._facts if self._facts is not None and not own.exists() else own

    @property
    def known_hosts(self) -> Path:
        return self.path(self.config.known_hosts)

    @property
    def store_url(self) -> str:
        if self.config.store:
            return self.config.store
        return f"sqlite:///{self.state_file.parent / 'llmgw-store.sqlite'}"


def _site_of(inventory: Path) -> tuple[Path, object] | None:
    """The llmgw.yaml that `inventory` belongs to (its folder or one of the two above) and its
    data (None when it cannot be read: Site.load reports that where it is loaded), or None."""
    start = inventory.resolve()
    for folder in [start if start.is_dir() else start.parent, *list(start.parents)[:2]]:
        path = folder / SITE_FILE
        if path.is_file():
            try:
                return path, load_yaml(path)
            except LlmgwError:
                return path, None
    return None


def recorded_site(inventory: Path) -> Path | None:
    """The llmgw.yaml of a recorded site that `inventory` belongs to, or None.
    llmgw.runner checks every Ansible run with it, whatever started it."""
    found = _site_of(inventory)
    if found is None:
        return None
    path, data = found
    return path if isinstance(data, dict) and data.get("recorded") is True else None


def known_hosts_of(inventory: Path) -> Path | None:
    """The known-hosts file of the site `inventory` belongs to (`known_hosts:` in its
    llmgw.yaml, default `known_hosts` beside it), or None outside a site."""
    found = _site_of(inventory)
    if found is None:
        return None
    path, data = found
    rel = data.get("known_hosts") if isinstance(data, dict) else None
    found_path = (path.parent / (rel if isinstance(rel, str) and rel else "known_hosts")).resolve()
    problem = known_hosts_problem(str(found_path))
    if problem:
        raise SiteError(f"{path}: known_hosts: {problem}",
                        hint="set `known_hosts:` in llmgw.yaml to such a path (the site folder's own path counts)")
    return found_path


def site_clock(site: Site, now: datetime | None = None) -> datetime | None:
    """The clock a site's plans and views are judged at (PlanInputs.now): `now`, else the time
    now. A recorded site's facts were gathered elsewhere, long ago: with no clock they never
    age into lost nodes (and no drain deadline passes there)."""
    return None if site.config.recorded else (now or datetime.now(UTC))
