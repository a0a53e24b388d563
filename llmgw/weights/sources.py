"""What a weights source is before anything is fetched: its size and, for GGUF, its header.

Inspecting needs the network (HEAD and range requests; for whole Hugging Face
repositories the site's endpoint only, llmgw.weights.hub), so it happens in `llmgw
catalog validate` and `llmgw facts`, and the answer is kept in the site's facts cache
(`<facts>/sources/<cache name>.json`); planning reads only that cache and stays offline.
A whole repository's record also holds the commit its revision named and the pinned
spec hosts fetch.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict, ValidationError

from llmgw.errors import FactsError, LlmgwError, WeightsError
from llmgw.weights.gguf import Fetch, file_fetcher, http_fetcher, read_header
from llmgw.weights.hub import HUB, is_repo_source, parse_repo
from llmgw.weights.hub import resolve as resolve_repo
from llmgw.weights.names import cache_name
from llmgw.weights.servable import tensor_types
from llmgw.yamlio import atomic_write, read_text

if TYPE_CHECKING:  # `llmgw plan` imports this module and never fetches: httpx is imported where used
    import httpx


class SourceInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    cache_name: str
    size_bytes: int | None = None  # None: not known (server sent no length)
    format: Literal["gguf", "other"] | None = None
    gguf_version: int | None = None
    architecture: str | None = None
    # GGUF `general.type`: "model", or "adapter" for a LoRA (None: the file does not say, or not GGUF).
    gguf_type: str | None = None
    # A PEFT adapter directory's adapter_config.json (a file:// directory on the control host):
    # the base it was trained on and its rank, where it says (None: not an adapter, or not said).
    adapter_base: str | None = None
    adapter_rank: int | None = None
    tensor_types: dict[int, list[str]] | None = None  # ggml type id -> a few tensor names of that type
    # Whole repositories: the commit the revision named, the files selected, and what hosts fetch.
    commit: str | None = None
    files: int | None = None
    # Each selected file and its size (None: the server did not say): what an operator's copy
    # must hold to be served in place (llmgw.weights.present). None: not recorded (an older record).
    file_sizes: dict[str, int | None] | None = None
    pinned: str | None = None
    inspected_at: datetime
    error: str | None = None  # why inspection failed; the rest is then not known


def split_spec(spec: str) -> tuple[str, list[str], list[str]]:
    """(source, include, exclude) of a catalog spec `hf://org/repo@rev?include=..&exclude=..`."""
    source, _, query = spec.partition("?")
    found: dict[str, list[str]] = {"include": [], "exclude": []}
    for part in filter(None, query.split("&")):
        key, _, value = part.partition("=")
        if key not in found:
            raise WeightsError(f"{spec}: unknown option {key!r} (include= and exclude= are known)")
        found[key] += [v for v in value.split(",") if v]
    return source, found["include"], found["exclude"]


def catalog_spec(source: str, include: list[str] | None = None, exclude: list[str] | None = None) -> str:
    """The key a catalog source is recorded under: the source itself, or for a whole repository
    the normalized `hf://org/repo@rev?include=..&exclude=..` (patterns change what is fetched)."""
    if not is_repo_source(source):
        return source
    return parse_repo(source, include or [], exclude or []).spec()


def resolve(source: str, endpoint: str = HUB) -> str | Path:
    """A local path for file://, else the https URL to fetch (hf:// resolved to the endpoint)."""
    parsed = urlparse(source)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "hf":
        parts = (parsed.netloc + parsed.path).strip("/").split("/")
        if len(parts) < 3:
            raise WeightsError(f"{source}: hf:// sources name a file (hf://org/repo/file) or a whole repository "
                               "(hf://org/repo[@revision])")
        org, repo, rest = parts[0], parts[1], "/".join(parts[2:])
        return f"{endpoint.rstrip('/')}/{org}/{repo}/resolve/main/{rest}"
    return source


def _inspect_repo(spec: str, client: httpx.Client, endpoint: str, now: datetime, token: str | None) -> SourceInfo:
    source, include, exclude = split_spec(spec)
    repo = parse_repo(source, include, exclude)
    info = resolve_repo(repo, endpoint, client, token)
    pinned = repo.spec(info.commit)
    return SourceInfo(source=spec, cache_name=cache_name(spec), size_bytes=info.size_bytes, format="other",
                      commit=info.commit, files=len(info.files), file_sizes=dict(sorted(info.files.items())),
                      pinned=pinned, inspected_at=now)


def _size_and_fetch(source: str, client: httpx.Client, endpoint: str) -> tuple[int | None, Fetch | None]:
    target = resolve(source, endpoint)
    if isinstance(target, Path):
        if target.is_dir():
            return sum(p.stat().st_size for p in target.rglob("*") if p.is_file()), None
        if not target.is_file():
            raise WeightsError(f"{source}: no such file on this control host")
        return target.stat().st_size, file_fetcher(target)
    resp = client.head(target, follow_redirects=True)
    if resp.status_code >= 400:
        raise WeightsError(f"{source}: HTTP {resp.status_code} for HEAD {target}")
    length = resp.headers.get("content-length")
    return (int(length) if length and length.isdigit() else None), http_fetcher(target, client)


def inspect_source(source: str, client: httpx.Client, endpoint: str = HUB, token: str | None = None) -> SourceInfo:
    """Size and GGUF header summary of `source` (a catalog spec); failures are recorded, not raised.

    hf:// sources are asked of `endpoint` (the site's mirror or the Hub) and nothing else;
    `token` (gated repositories) goes to it only over https."""
    import httpx

    now = datetime.now(UTC).replace(microsecond=0)
    name = cache_name(source)
    try:
        if is_repo_source(source.partition("?")[0]):
            return _inspect_repo(source, client, endpoint, now, token)
        size, fetch = _size_and_fetch(source, client, endpoint)
        if fetch is None:
            base, rank = _peft_config(resolve(source, endpoint))
            return SourceInfo(source=source, cache_name=name, size_bytes=size, format="other", adapter_base=base,
                              adapter_rank=rank, inspected_at=now)
        magic = fetch(0, 4)
        if magic != b"GGUF":
            return SourceInfo(source=source, cache_name=name, size_bytes=size, format="other", inspected_at=now)
        header = read_header(fetch, source)
        return SourceInfo(source=source, cache_name=name, size_bytes=size, format="gguf",
                          gguf_version=header.version, architecture=header.architecture,
                          gguf_type=_general_type(header.metadata),
                          tensor_types=tensor_types(header), inspected_at=now)
    except WeightsError as exc:
        return SourceInfo(source=source, cache_name=name, inspected_at=now, error=exc.message)
    except (httpx.HTTPError, OSError) as exc:
        return SourceInfo(source=source, cache_name=name, inspected_at=now, error=f"{source}: {exc}")


def _peft_config(target: str | Path) -> tuple[str | None, int | None]:
    """(base_model_name_or_path, r) of a PEFT adapter directory's adapter_config.json; what is
    missing, malformed or not a directory is (None, None): the engine is left to say."""
    if not isinstance(target, Path) or not (target / "adapter_config.json").is_file():
        return None, None
    try:
        doc = json.loads((target / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    if not isinstance(doc, dict):
        return None, None
    base, rank = doc.get("base_model_name_or_path"), doc.get("r")
    return (base if isinstance(base, str) and base else None,
            rank if isinstance(rank, int) and not isinstance(rank, bool) and rank > 0 else None)


def _general_type(metadata: dict[str, object]) -> str | None:
    kind = metadata.get("general.type")
    return kind if isinstance(kind, str) else None


def _dir(facts_dir: Path) -> Path:
    return facts_dir / "sources"


def read_sources(facts_dir: Path) -> dict[str, SourceInfo]:
    """Every inspected source in the facts cache, by source URL."""
    out: dict[str, SourceInfo] = {}
    folder = _dir(facts_dir)
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.json")):
        try:
            info = SourceInfo.model_validate_json(read_text(path))
        except (ValidationError, LlmgwError) as exc:
            raise FactsError(f"{path} is not a llmgw source record: {exc}",
                             hint="delete it; `llmgw catalog validate` inspects the source again") from None
        out[info.source] = info
    return out


def write_source(facts_dir: Path, info: SourceInfo) -> None:
    atomic_write(_dir(facts_dir) / f"{info.cache_name}.json", info.model_dump_json(indent=2) + "\n")
