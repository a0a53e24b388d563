"""Browsing the site's Hugging Face endpoint (the Hub or the `mirror:`): search, and what a
repository holds — its files, formats and quantizations, the size of each variant, and
which catalog profiles and which nodes could hold it. Asks the site's endpoint only.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx

from llmgw.catalog import Catalog
from llmgw.engines.descriptor import for_format
from llmgw.errors import WeightsError
from llmgw.facts import HostFacts
from llmgw.inventory import Host
from llmgw.weights.hub import parse_repo, resolve
from llmgw.weights.shared import cache_filesystem

# A GGUF file's quantization, as the file names on the Hub spell it (Q4_K_M, IQ3_XS, Q8_0, F16, ...).
_GGUF_QUANT = re.compile(r"(?i)(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32)(?![A-Za-z0-9])")
_SHARD = re.compile(r"-\d{5}-of-\d{5}")
# Each a format of llmgw.engines.descriptor.WEIGHT_FORMATS; which engines take it, their descriptors say.
WEIGHT_SUFFIXES = {".gguf": "gguf", ".safetensors": "safetensors", ".bin": "pytorch", ".pt": "pytorch",
                   ".pth": "pytorch"}
MAX_HEADER = 16 * 1024 * 1024  # a safetensors header larger than this is not read


@dataclass(frozen=True)
class Found:
    repo: str
    downloads: int | None
    likes: int | None
    updated: str | None
    tags: list[str]


@dataclass
class Variant:
    name: str  # "Q4_K_M", "safetensors BF16", ...
    format: str  # gguf, safetensors, pytorch
    files: list[str]
    size_bytes: int | None  # its weight files and the repository's other files
    engines: tuple[str, ...]
    profiles: list[str] = field(default_factory=list)  # catalog MODEL/PROFILE with a fitting engine
    nodes: list[str] = field(default_factory=list)  # nodes whose cache has room for it


@dataclass
class Inspection:
    source: str
    commit: str
    files: dict[str, int | None]
    variants: list[Variant]


def search(query: str, endpoint: str, client: httpx.Client, limit: int = 20) -> list[Found]:
    """Repositories whose name matches `query`, most downloaded first (the Hub's /api/models)."""
    resp = client.get(f"{endpoint.rstrip('/')}/api/models", follow_redirects=False,
                      params={"search": query, "limit": str(limit), "sort": "downloads", "direction": "-1"})
    if resp.status_code != 200:
        raise WeightsError(f"{endpoint} answered HTTP {resp.status_code} to a model search",
                           hint="an offline mirror may not search; `llmgw models inspect hf://ORG/REPO` still works")
    try:
        rows = resp.json()
        if not isinstance(rows, list):
            raise TypeError
    except (ValueError, TypeError):
        raise WeightsError(f"{endpoint} sent no list of models; it does not search (an offline mirror?)",
                           hint="`llmgw models inspect hf://ORG/REPO` asks for one repository") from None
    out = []
    for r in rows:
        if isinstance(r, dict) and isinstance(r.get("id") or r.get("modelId"), str):
            out.append(Found(repo=str(r.get("id") or r.get("modelId")), downloads=_int(r.get("downloads")),
                             likes=_int(r.get("likes")), updated=_str(r.get("lastModified")),
                             tags=[str(t) for t in r.get("tags") or [] if isinstance(t, str)][:8]))
    return out[:limit]


def inspect(source: str, endpoint: str, client: httpx.Client) -> Inspection:
    """What `hf://org/repo[@revision]` holds, at the commit the revision names."""
    repo = parse_repo(source)
    info = resolve(repo, endpoint, client)
    base = f"{endpoint.rstrip('/')}/{repo.repo}/resolve/{info.commit}"
    others = {n: s for n, s in info.files.items() if _format(n) is None}
    rest = None if any(s is None for s in others.values()) else sum(s or 0 for s in others.values())
    groups: dict[tuple[str, str], list[str]] = {}
    for name in sorted(info.files):
        fmt = _format(name)
        if fmt is not None:
            groups.setdefault((fmt, _gguf_quant(name) if fmt == "gguf" else ""), []).append(name)
    variants = []
    for (fmt, quant), files in sorted(groups.items()):
        if fmt == "safetensors":
            quant = _checkpoint_quant(base, files[0], client)
        sizes = [info.files[f] for f in files]
        size = None if rest is None or any(s is None for s in sizes) else rest + sum(s or 0 for s in sizes)
        variants.append(Variant(name=f"{quant}" if fmt == "gguf" else f"{fmt} {quant}".strip(), format=fmt,
                                files=files, size_bytes=size, engines=for_format(fmt)))
    return Inspection(source=repo.spec(), commit=info.commit, files=info.files, variants=variants)


def place(found: Inspection, catalog: Catalog, nodes: Mapping[str, Host], facts: Mapping[str, HostFacts]) -> None:
    """Fill in, per variant, the catalog profiles with a fitting engine and the nodes with room for it."""
    for v in found.variants:
        v.profiles = [f"{m.name}/{p.name}" for m in catalog for p in m.profiles if p.engine in v.engines]
        v.nodes = []
        for name, host in sorted(nodes.items()):
            fs = cache_filesystem(host, facts.get(name))
            if fs is not None and v.size_bytes is not None and fs.free_bytes >= v.size_bytes:
                v.nodes.append(name)


def _format(name: str) -> str | None:
    for suffix, fmt in WEIGHT_SUFFIXES.items():
        if name.endswith(suffix) and not name.endswith("training_args.bin"):
            return fmt
    return None


def _gguf_quant(name: str) -> str:
    stem = _SHARD.sub("", name.rsplit("/", 1)[-1].removesuffix(".gguf"))
    found = _GGUF_QUANT.findall(stem)
    return found[-1].upper() if found else stem


def _checkpoint_quant(base: str, first: str, client: httpx.Client) -> str:
    """The quantization method in config.json when there is one (awq, gptq, fp8, ...), else the
    tensor dtypes of the first shard's header (BF16, F16, ...); empty when neither is readable."""
    try:
        resp = client.get(f"{base}/config.json", follow_redirects=False)
        if resp.status_code == 200:
            qc = resp.json().get("quantization_config")
            if isinstance(qc, dict) and isinstance(qc.get("quant_method"), str):
                return str(qc["quant_method"]).upper()
        return "/".join(sorted(_safetensors_dtypes(f"{base}/{quote(first)}", client)))
    except (httpx.HTTPError, ValueError, AttributeError):
        return ""


def _safetensors_dtypes(url: str, client: httpx.Client) -> set[str]:
    """Tensor dtypes from a safetensors header: 8 bytes of length, then JSON; the rest is never read."""
    with client.stream("GET", url, headers={"Range": f"bytes=0-{MAX_HEADER + 7}"}, follow_redirects=False) as resp:
        if resp.status_code not in (200, 206):
            return set()
        buf = b""
        need: int | None = None
        for chunk in resp.iter_bytes():
            buf += chunk
            if need is None and len(buf) >= 8:
                (n,) = struct.unpack("<Q", buf[:8])
                if n > MAX_HEADER:
                    return set()
                need = 8 + n
            if need is not None and len(buf) >= need:
                header = json.loads(buf[8:need])
                return {str(t["dtype"]) for k, t in header.items() if k != "__metadata__" and "dtype" in t}
    return set()


def _int(v: object) -> int | None:
    return v if isinstance(v, int) else None


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None
