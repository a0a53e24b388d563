"""What a weights source is before anything is fetched: its size and, for GGUF, its header.

Inspecting needs the network (HEAD and range requests), so it happens in `llmgw
catalog validate` and `llmgw facts`, and the answer is kept in the site's facts cache
(`<facts>/sources/<cache name>.json`); planning reads only that cache and stays offline.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from llmgw.errors import FactsError, WeightsError
from llmgw.weights.gguf import Fetch, file_fetcher, http_fetcher, read_header
from llmgw.weights.names import cache_name
from llmgw.weights.servable import tensor_types
from llmgw.yamlio import atomic_write

HF_ENDPOINT_ENV = "HF_ENDPOINT"


class SourceInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    cache_name: str
    size_bytes: int | None = None  # None: not known (server sent no length)
    format: Literal["gguf", "other"] | None = None
    gguf_version: int | None = None
    architecture: str | None = None
    tensor_types: dict[int, list[str]] | None = None  # ggml type id -> a few tensor names of that type
    inspected_at: datetime
    error: str | None = None  # why inspection failed; the rest is then not known


def hf_endpoint() -> str:
    return os.environ.get(HF_ENDPOINT_ENV, "https://huggingface.co").rstrip("/")


def resolve(source: str) -> str | Path:
    """A local path for file://, else the https URL to fetch (hf:// resolved to the hub)."""
    parsed = urlparse(source)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "hf":
        parts = (parsed.netloc + parsed.path).strip("/").split("/")
        if len(parts) < 3:
            raise WeightsError(f"{source}: hf:// sources name a file (hf://org/repo/file); "
                               "a whole repository is only sized, not fetched by llama.cpp profiles")
        org, repo, rest = parts[0], parts[1], "/".join(parts[2:])
        return f"{hf_endpoint()}/{org}/{repo}/resolve/main/{rest}"
    return source


def _hf_repo_size(source: str, client: httpx.Client) -> int | None:
    parts = urlparse(source)
    org_repo = (parts.netloc + parts.path).strip("/")
    resp = client.get(f"{hf_endpoint()}/api/models/{org_repo}", params={"blobs": "true"}, follow_redirects=True)
    if resp.status_code != 200:
        raise WeightsError(f"{source}: the hub answered HTTP {resp.status_code} for the repository")
    sizes = [s.get("size") for s in resp.json().get("siblings", [])]
    return sum(s for s in sizes if isinstance(s, int)) if sizes and all(isinstance(s, int) for s in sizes) else None


def _size_and_fetch(source: str, client: httpx.Client) -> tuple[int | None, Fetch | None]:
    parsed = urlparse(source)
    if parsed.scheme == "hf" and len((parsed.netloc + parsed.path).strip("/").split("/")) == 2:
        return _hf_repo_size(source, client), None
    target = resolve(source)
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


def inspect_source(source: str, client: httpx.Client) -> SourceInfo:
    """Size and GGUF header summary of `source`; failures are recorded, not raised."""
    now = datetime.now(UTC).replace(microsecond=0)
    name = cache_name(source)
    try:
        size, fetch = _size_and_fetch(source, client)
        if fetch is None:
            return SourceInfo(source=source, cache_name=name, size_bytes=size, format="other", inspected_at=now)
        magic = fetch(0, 4)
        if magic != b"GGUF":
            return SourceInfo(source=source, cache_name=name, size_bytes=size, format="other", inspected_at=now)
        header = read_header(fetch, source)
        return SourceInfo(source=source, cache_name=name, size_bytes=size, format="gguf",
                          gguf_version=header.version, architecture=header.architecture,
                          tensor_types=tensor_types(header), inspected_at=now)
    except WeightsError as exc:
        return SourceInfo(source=source, cache_name=name, inspected_at=now, error=exc.message)
    except (httpx.HTTPError, OSError) as exc:
        return SourceInfo(source=source, cache_name=name, inspected_at=now, error=f"{source}: {exc}")


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
            info = SourceInfo.model_validate_json(path.read_text())
        except (ValidationError, OSError) as exc:
            raise FactsError(f"{path} is not a llmgw source record: {exc}",
                             hint="delete it; `llmgw catalog validate` inspects the source again") from None
        out[info.source] = info
    return out


def write_source(facts_dir: Path, info: SourceInfo) -> None:
    atomic_write(_dir(facts_dir) / f"{info.cache_name}.json", info.model_dump_json(indent=2) + "\n")
