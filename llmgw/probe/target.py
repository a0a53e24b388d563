"""Where a probe goes and as whom: the router's URL, the API key, and what serves the model.

The router's URL: `--router-url`, else $LLMGW_ROUTER_URL, else the first host of the
inventory's `llmgw_routers` at its management address and the port of its
`llmgw_router_listen` (default 8000, role llmgw_router). The key: `--key-file FILE`, else
$LLMGW_API_KEY; never an option's value, since command lines are visible to every user
of the host (`ps`) and land in shell history.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from llmgw.errors import UsageError
from llmgw.site import Site
from llmgw.state import State

ROUTER_URL_ENV = "LLMGW_ROUTER_URL"
API_KEY_ENV = "LLMGW_API_KEY"
DEFAULT_LISTEN = "0.0.0.0:8000"  # role llmgw_router's llmgw_router_listen
_KEY_FILE_MAX = 4096


@dataclass(frozen=True)
class Served:
    """What serves a model now, from the state: the record a result is stored under."""

    model: str
    profiles: str  # sorted, comma-joined
    engine: str
    nodes: str
    replicas: tuple[str, ...]


def served_by(state: State, name: str) -> Served:
    """The model `name` (or an alias) and its ready replicas; an error when none is ready."""
    record = next((m for m in state.models if name == m.name or name in m.aliases), None)
    if record is None:
        known = ", ".join(m.name for m in state.models) or "none"
        raise UsageError(f"no model {name!r} in the state (serial {state.serial})",
                         hint=f"models in the state: {known}; `llmgw apply` starts a model of the catalog")
    ready = [r for r in state.replicas if r.model == record.name and r.state == "ready"]
    if not ready:
        raise UsageError(f"model {record.name!r} has no ready replica in the state",
                         hint="`llmgw replicas` shows its replicas; `llmgw apply` starts them")
    return Served(model=record.name, profiles=",".join(sorted({r.profile for r in ready})),
                  engine=",".join(sorted({r.engine for r in ready})),
                  nodes=",".join(sorted({s.node for r in ready for s in r.shards})),
                  replicas=tuple(sorted(r.id for r in ready)))


def check_url(url: str, where: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password \
            or parts.query or parts.fragment:
        raise UsageError(f"{where}: {url!r} is not a router URL",
                         hint="use http(s)://HOST:PORT, without credentials (the key goes in $LLMGW_API_KEY)")
    return url.rstrip("/")


def router_url(site: Site | None, given: str | None) -> str:
    if given:
        return check_url(given, "--router-url")
    env = os.environ.get(ROUTER_URL_ENV, "").strip()
    if env:
        return check_url(env, f"${ROUTER_URL_ENV}")
    if site is None or not site.inventory.exists():
        raise UsageError("no router to send requests to",
                         hint=f"pass --router-url URL or set ${ROUTER_URL_ENV}, or run in a site whose "
                              "inventory has a llmgw_routers host")
    from llmgw.inventory import load_inventory

    routers = load_inventory(site.inventory).routers
    if not routers:
        raise UsageError(f"the inventory {site.inventory} has no llmgw_routers host",
                         hint=f"pass --router-url URL or set ${ROUTER_URL_ENV}")
    host = routers[sorted(routers)[0]]
    listen = str(host.vars.get("llmgw_router_listen") or DEFAULT_LISTEN)
    port = listen.rpartition(":")[2]
    if not port.isdigit():
        raise UsageError(f"llmgw_router_listen of {host.name} is {listen!r}, which names no port",
                         hint=f"pass --router-url URL or set ${ROUTER_URL_ENV}")
    address = host.mgmt_address or host.name
    if ":" in address:
        address = f"[{address}]"
    return f"http://{address}:{port}"


def api_key(key_file: Path | None) -> str:
    """The API key from `key_file`, else $LLMGW_API_KEY."""
    if key_file is not None:
        try:
            with key_file.open("rb") as fh:
                raw = fh.read(_KEY_FILE_MAX + 1)
        except OSError as exc:
            raise UsageError(f"cannot read the key file {key_file}: {exc.strerror}") from None
        lines = [ln.strip() for ln in raw.decode("utf-8", "replace").splitlines() if ln.strip()]
        if len(raw) > _KEY_FILE_MAX or len(lines) != 1:
            raise UsageError(f"{key_file} must hold one API key on one line",
                             hint="write it there with `llmgw keys create NAME > FILE`")
        return _checked(lines[0], str(key_file))
    env = os.environ.get(API_KEY_ENV, "").strip()
    if env:
        return _checked(env, f"${API_KEY_ENV}")
    raise UsageError("no API key for the router",
                     hint=f"set ${API_KEY_ENV} or pass --key-file FILE (make a key with `llmgw keys create NAME`)")


def _checked(key: str, where: str) -> str:
    if any(ord(c) < 0x21 or ord(c) > 0x7e for c in key):
        raise UsageError(f"{where} holds a key with spaces or control characters",
                         hint="an API key is one word of printable ASCII")
    return key


def engine_version(engines: str, fingerprint: str | None) -> str:
    """The engine's version as the engine said it (llama-server puts its build in each answer's
    `system_fingerprint`), else the version llmgw pins and installs (vLLM, SGLang: their
    descriptors'), else `unknown`."""
    if fingerprint:
        return " ".join(str(fingerprint).split())[:80]
    from llmgw.engines import find

    pinned = {e: d.version for e in engines.split(",") if (d := find(e)) is not None and d.version}
    known = [f"{e} {pinned[e]}" for e in engines.split(",") if e in pinned]
    return ", ".join(known) if known and len(known) == len(engines.split(",")) else "unknown"
