"""Servable before placed: catalog models whose GGUF the fleet's llama-server cannot load,
and whole Hugging Face repositories resolved to a commit and sized.

`llmgw catalog validate` inspects sources it has not seen (network: the site's endpoint
for hf://) and records them in the facts cache; `llmgw plan` reads only that record, so
planning stays offline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from llmgw.catalog import Catalog, Located, Model, adapter_profiles
from llmgw.errors import CatalogError, Problem
from llmgw.site import Site
from llmgw.weights.hub import HUB, is_repo_source
from llmgw.weights.servable import CAPS_FILE, EngineCaps, servable_problems
from llmgw.weights.sources import SourceInfo, catalog_spec, inspect_source, read_sources, write_source


def engine_dir(site: Site) -> Path:
    """Where the llama-server artifact (and its caps) live on this control host."""
    if site.config.engine_artifacts:
        return site.path(site.config.engine_artifacts)
    return Path(os.environ.get("LLMGW_CACHE", Path.home() / ".cache" / "llmgw")) / "engine"


def hf_endpoint(site: Site) -> str:
    """Where hf:// sources are sized and fetched: the site's `mirror:`, else the Hub."""
    return site.config.mirror or HUB


def weights_host_vars(site: Site) -> dict[str, object]:
    """The llmgw_weights role's endpoint variables for this site (none: the role's defaults, the Hub)."""
    if not site.config.mirror:
        return {}
    return {"llmgw_weights_hf_endpoint": site.config.mirror,
            "llmgw_weights_hf_allow_http": site.config.mirror.startswith("http://")}


def reachable(source: str, endpoint: str) -> bool:
    """May `catalog validate` inspect `source`? hf:// and file:// (resolved to the endpoint or
    read here), and http(s) URLs on the endpoint's own scheme, host and port; nothing else."""
    parts = urlsplit(source)
    if parts.scheme in ("hf", "file"):
        return True
    try:
        mine = urlsplit(endpoint)
        return (parts.scheme, parts.hostname, parts.port or _PORTS.get(parts.scheme)) == \
            (mine.scheme, mine.hostname, mine.port or _PORTS.get(mine.scheme))
    except ValueError:  # a port that is not a number
        return False


_PORTS = {"http": 80, "https": 443}


def foreign_sources(catalog: Catalog, site: Site) -> list[Problem]:
    """A problem per model whose http(s) source is not on the site's endpoint: hosts fetch
    only from there (as root, from inside the fleet's network), so a catalog URL to any other
    host would make every GPU host send requests wherever a pull request says."""
    endpoint = hf_endpoint(site)
    out: list[Problem] = []
    for model in catalog:
        if urlsplit(model.source).scheme in ("http", "https") and not reachable(model.source, endpoint):
            where = catalog.where(model.name)
            out.append(Problem(where.file, where.line, f"models[{where.index}].source",
                               f"{model.source} is not on the site's endpoint {endpoint}: hosts fetch only from it "
                               "(`mirror:` in llmgw.yaml); use hf://ORG/REPO/FILE, a URL on that endpoint, or "
                               "file:///PATH under the hosts' llmgw_model_dirs"))
    return out


def model_spec(model: Model) -> str:
    """The key a model's source is recorded under (whole repositories: with revision and patterns)."""
    return catalog_spec(model.source, list(model.include), list(model.exclude))


@dataclass
class Servability:
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: dict[str, SourceInfo] = field(default_factory=dict)
    sized: list[str] = field(default_factory=list)  # one line per whole repository: commit, files, size


def llamacpp_sources(catalog: Catalog) -> list[str]:
    """GGUF sources llama.cpp loads: models with a llama.cpp profile, and their adapters that load there."""
    out = {m.source for m in catalog if any(p.engine == "llamacpp" for p in m.profiles)}
    out |= {a.source for m in catalog for i, a in enumerate(m.adapters)
            if any(p.engine == "llamacpp" for p in adapter_profiles(m, i))}
    return sorted(out)


def repo_specs(catalog: Catalog) -> list[str]:
    return sorted({model_spec(m) for m in catalog if is_repo_source(m.source)})


def _size_text(n: int | None) -> str:
    if n is None:
        return "size not known"
    size, unit = float(n), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            break
        size /= 1000
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit} ({n} bytes)"


def check_servable(catalog: Catalog, site: Site, *, inspect: bool, refresh: bool = False) -> Servability:
    """Problems for unservable llama.cpp models; `inspect` lets it fetch headers it lacks."""
    out = Servability(sources=read_sources(site.facts_dir), problems=foreign_sources(catalog, site))
    wanted = llamacpp_sources(catalog)
    repos = repo_specs(catalog)
    # Every adapter, so a PEFT directory's adapter_config.json is read too (a GGUF one is in `wanted`).
    adapters = {a.source for m in catalog for a in m.adapters}
    todo = [s for s in sorted({*wanted, *repos, *adapters}) if refresh or s not in out.sources]
    if inspect:
        # validate runs on untrusted pull requests: it contacts only the site's endpoint (a source
        # elsewhere is a problem above; it is not asked either)
        todo = [s for s in todo if reachable(s, hf_endpoint(site))]
    if inspect and todo:
        import httpx  # here, not at the top: `llmgw plan` imports this module and never fetches

        with httpx.Client(timeout=30) as client:
            for source in todo:
                # HF_TOKEN on the control host sizes gated repositories (sent to the endpoint over https only).
                inspected = inspect_source(source, client, hf_endpoint(site), os.environ.get("HF_TOKEN") or None)
                write_source(site.facts_dir, inspected)
                out.sources[source] = inspected
    unresolved: list[str] = []
    for spec in repos:
        info = out.sources.get(spec)
        if info is None:
            unresolved.append(spec)
        elif info.error:
            out.notes.append(f"could not resolve {spec}: {info.error}")
        else:
            files = "file count not recorded" if info.files is None else f"{info.files} files"
            out.sized.append(f"{spec}: commit {info.commit}, {files}, {_size_text(info.size_bytes)}")
    caps_path = engine_dir(site) / CAPS_FILE
    caps = EngineCaps.load(caps_path) if caps_path.is_file() else None
    if caps is None and wanted:
        out.notes.append(f"llama-server capabilities not found at {caps_path}: GGUF models were not checked "
                         "(scripts/build-engine writes them beside the binary)")
    if unresolved:
        out.notes.append(f"{_some(unresolved)}: not resolved to a commit yet; run `llmgw catalog validate` (online)")
    gguf = set(wanted)  # a set: `in` on the sorted list made 10,000 models a quadratic 0.5 s
    not_inspected: list[str] = []
    for model in catalog:
        if model.source not in gguf:
            continue
        info = out.sources.get(model.source)
        where = catalog.where(model.name)
        if info is None:
            not_inspected.append(model.name)
        elif info.error:
            out.notes.append(f"{model.name}: could not inspect {model.source}: {info.error}")
        elif caps is not None:
            out.problems.extend(Problem(where.file, where.line, f"models[{where.index}].source", reason)
                                for reason in source_problems(info, caps))
    if not_inspected:
        out.notes.append(f"{_some(not_inspected)}: source not inspected yet; run `llmgw catalog validate` (online)")
    out.problems.extend(adapter_problems(catalog, out.sources))
    return out


def adapter_problems(catalog: Catalog, sources: dict[str, SourceInfo]) -> list[Problem]:
    """LoRA adapters llama.cpp would refuse, from their recorded GGUF headers: a file that is
    not an adapter (`general.type`), or one made for another architecture than its base's.
    An adapter or base not inspected (or not GGUF) is left to the engine."""
    out: list[Problem] = []
    for model in catalog:
        if not model.adapters:
            continue
        where = catalog.where(model.name)
        base = sources.get(model.source)
        for i, adapter in enumerate(model.adapters):
            info = sources.get(adapter.source)
            if info is None or info.error:
                continue
            at = f"models[{where.index}].adapters[{i}].source"
            line = where.line_at(f"adapters[{i}].source")
            out.extend(Problem(where.file, line, at, why) for why in _peft_problems(model, adapter.source, info))
            if not any(p.engine == "llamacpp" for p in adapter_profiles(model, i)):
                continue
            if info.format != "gguf":
                out.append(Problem(where.file, line, at, f"{adapter.source} is not a GGUF file; llama.cpp loads "
                                   "LoRA adapters in GGUF (convert it with llama.cpp's convert_lora_to_gguf.py)"))
            elif info.gguf_type != "adapter":
                out.append(Problem(where.file, line, at, f"{adapter.source} is a GGUF of type "
                                   f"{info.gguf_type or 'unknown'!r}, not an adapter (general.type=adapter); "
                                   "name a LoRA adapter file, or serve this one as a model"))
            elif base is not None and base.format == "gguf" and base.architecture and \
                    info.architecture != base.architecture:
                out.append(Problem(where.file, line, at, f"{adapter.source} is an adapter for "
                                   f"{info.architecture or 'an unknown architecture'}, but {model.name} is "
                                   f"{base.architecture}; name an adapter trained for this base"))
    return out


def _some(names: list[str], shown: int = 5) -> str:
    """`a, b, c` or, for many, `a, b, c, d, e and 9,995 more`: one note for a catalog whose
    10,000 models were never inspected, not 10,000 lines that say the same."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])} and {len(names) - shown:,} more"


def source_problems(info: SourceInfo, caps: EngineCaps) -> list[str]:
    """Why llama-server cannot load this recorded source; empty when it can or it is not GGUF."""
    if info.format != "gguf":
        return []
    return servable_problems(info.gguf_version or 0, info.architecture, info.tensor_types or {}, caps)


def unservable_sources(site: Site) -> dict[str, list[str]]:
    """Source -> reasons llama-server cannot load it, from the facts cache only (offline, for plan)."""
    caps_path = engine_dir(site) / CAPS_FILE
    if not caps_path.is_file():
        return {}
    caps = EngineCaps.load(caps_path)
    out = {}
    for source, info in read_sources(site.facts_dir).items():
        reasons = source_problems(info, caps)
        if reasons:
            out[source] = reasons
    return out



def pin_catalog(catalog: Catalog, site: Site) -> tuple[Catalog, dict[str, list[str]]]:
    """The catalog with every whole repository's source replaced by its pinned spec (offline,
    from the records `catalog validate` wrote), and why each one not resolved yet cannot be placed.

    The planner then names cache entries, spec hashes and the plan's sources after the commit:
    a branch that moved is a visible replacement, never new weights under an old name."""
    foreign = foreign_sources(catalog, site)
    if foreign:
        raise CatalogError(foreign)
    records = read_sources(site.facts_dir)
    entries: list[Located] = []
    unpinned: dict[str, list[str]] = {}
    for e in catalog.entries:
        m = e.model
        if is_repo_source(m.source):
            spec = model_spec(m)
            info = records.get(spec)
            if info is not None and info.pinned:
                m = m.model_copy(update={"source": info.pinned, "include": [], "exclude": []})
            else:
                why = info.error if info is not None and info.error else "not resolved yet"
                unpinned[m.source] = [f"{spec} is not pinned to a commit ({why}); run `llmgw catalog validate` "
                                      "where the site's Hugging Face endpoint is reachable"]
        if any(is_repo_source(a.source) for a in m.adapters):  # whole-repository adapters: pinned alike
            pinned = []
            for a in m.adapters:
                info = records.get(catalog_spec(a.source)) if is_repo_source(a.source) else None
                if info is not None and info.pinned:
                    a = a.model_copy(update={"source": info.pinned})
                elif is_repo_source(a.source):
                    why = info.error if info is not None and info.error else "not resolved yet"
                    unpinned.setdefault(m.source, []).append(
                        f"adapter {a.name}: {a.source} is not pinned to a commit ({why}); run `llmgw catalog "
                        "validate` where the site's Hugging Face endpoint is reachable")
                pinned.append(a)
            m = m.model_copy(update={"adapters": pinned})
        entries.append(Located(m, e.file, e.line, e.index))
    return Catalog(entries, catalog.route_entries), unpinned  # routes fetch nothing: as they are


# The largest LoRA rank vLLM serves (llmgw.engines.vllm.LORA_RANKS); SGLang takes any.
_MAX_VLLM_RANK = 512


def _peft_problems(model: Model, source: str, info: SourceInfo) -> list[str]:
    """A PEFT adapter trained on another base than the model's (by repository name, the last
    part of both), or of a rank vLLM does not serve, from its adapter_config.json."""
    out = []
    if info.adapter_base:
        theirs = info.adapter_base.rstrip("/").rsplit("/", 1)[-1].lower()
        ours = model.source.partition("?")[0].rstrip("/").rsplit("/", 1)[-1].partition("@")[0].lower()
        if theirs != ours:
            out.append(f"{source}: its adapter_config.json says it was trained on {info.adapter_base!r}, but "
                       f"{model.name}'s source is {model.source}; name an adapter trained for this base")
    if info.adapter_rank and info.adapter_rank > _MAX_VLLM_RANK and any(p.engine == "vllm" for p in model.profiles):
        out.append(f"{source}: rank {info.adapter_rank} (adapter_config.json `r`) is larger than vLLM serves "
                   f"({_MAX_VLLM_RANK}); use a smaller adapter, or an SGLang profile")
    return out
