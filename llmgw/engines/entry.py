"""The host's own check of a shard entry (the llmgw_engine role's preflight, through its
`llmgw_engine_refusals` filter): every value that reaches a unit, a path or a command line.

The entry comes from a plan and a state, files a committer or a compromised control host
may have edited, so the host checks again what `catalog validate` checked (the args and
env lists of llmgw.engines.flags, the one source of both) and more: every string of the
entry, at any depth, is one line of printable text (a newline or a NUL in any of them
would start a new unit directive), and names, paths and addresses match the shapes llmgw
makes them in.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from llmgw.engines.descriptor import find
from llmgw.engines.flags import check_args, check_env_name
from llmgw.engines.shard import HOST_PATH_RE, Peer, is_host_path

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The shapes llmgw writes each value in (planner/spec.py, catalog/schema.py, apply/executor.py).
_NAME = r"[a-z0-9][a-z0-9._-]{0,200}"
PATTERNS: dict[str, re.Pattern[str]] = {
    "unit": re.compile(r"^llmgw-[A-Za-z0-9][A-Za-z0-9._-]*$"),
    "replica": re.compile(rf"^{_NAME}$"),
    "model": re.compile(rf"^{_NAME}$"),
    "lineage": re.compile(r"^[A-Za-z0-9-]{0,64}$"),
    # absolute, no `.`/`..` parts (checked below), only characters cache names are made of
    "model_path": HOST_PATH_RE,
    "leader": re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$|^$"),
    "fabric": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$|^$"),
    "socket_ifname": re.compile(r"^[=^]?[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}(,[A-Za-z0-9][A-Za-z0-9._:@-]{0,63})*$|^$"),
    "state": re.compile(r"^(present|absent)$"),
}
_HCA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
_GPU_UUID = re.compile(r"^(?:GPU|MIG)-[0-9A-Za-z-]{1,90}$")  # as NVML names them (llmgw.planner.schema)
_INTS = ("port", "rank", "nodes")


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(where, text) of every string in the entry, keys included."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(k, f"{path} (a key)")
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


def _peer_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"peers entry {value!r} is not address:port"
    try:
        Peer.parse(value)
    except ValueError as e:
        return str(e)
    return None


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and value.isdigit())


def check_entry(entry: Mapping[str, Any]) -> list[str]:
    """One message per problem of a present shard entry (defaults filled in); [] when clean."""
    out = [f"{where} contains the control character {m.group()!r}: every value is one line of printable text"
           for where, text in _strings(dict(entry), "shard")
           if (m := _CONTROL.search(text))]
    for key, pattern in PATTERNS.items():
        # Ansible hands an empty optional string over as null (the role's argument spec has no
        # default for it): absent and null are "", which the optional patterns take.
        value = entry.get(key)
        value = "" if value is None else value
        if not isinstance(value, str) or not pattern.match(value):
            out.append(f"{key} {value!r} does not match {pattern.pattern}")
    path = str(entry.get("model_path", ""))
    if {".", ".."} & set(path.split("/")):
        out.append(f"model_path {path!r} has '.' or '..' parts")
    for key in _INTS:
        if key in entry and not _is_int(entry[key]):
            out.append(f"{key} {entry[key]!r} is not a whole number")
    gpus = entry.get("gpus") or []
    if not isinstance(gpus, list) or not all(_is_int(g) for g in gpus):
        out.append(f"gpus {gpus!r} is not a list of GPU indexes")
    peers = entry.get("peers") or []
    out += [why for p in (peers if isinstance(peers, list) else [peers]) if (why := _peer_problem(p))]
    hcas = entry.get("ib_hcas") or []
    out += [f"ib_hcas entry {h!r} is not an adapter name" for h in (hcas if isinstance(hcas, list) else [hcas])
            if not isinstance(h, str) or not _HCA.match(h)]
    uuids = entry.get("gpu_uuids") or []
    if not isinstance(uuids, list) or not all(isinstance(u, str) and _GPU_UUID.match(u) for u in uuids) \
            or (uuids and len(uuids) != len(gpus if isinstance(gpus, list) else [])):
        out.append(f"gpu_uuids {uuids!r} is not one NVML UUID (GPU-...) per GPU index of gpus")
    numa = entry.get("numa_node")
    if numa is not None and not (_is_int(numa) and 0 <= int(numa) <= 1023):
        out.append(f"numa_node {numa!r} is not a NUMA node number (0-1023) or null")
    if not isinstance(entry.get("trust_remote_code", False), bool):
        out.append(f"trust_remote_code {entry['trust_remote_code']!r} is not true or false")
    out += _adapter_problems(entry.get("adapters") or [], str(entry.get("engine", "")))
    out += _max_loras_problems(entry.get("max_loras"), str(entry.get("engine", "")))
    engine = str(entry.get("engine", ""))
    args = entry.get("args") or []
    if find(engine) is not None and isinstance(args, list):
        out += [f"args[{r.index}]: {r.message}" for r in check_args(engine, [str(a) for a in args])]
    env = entry.get("env") or {}
    if isinstance(env, Mapping):
        out += [f"env: {why}" for why in (check_env_name(str(n)) for n in env) if why]
    else:
        out.append("env is not a mapping of names to values")
    return out


def _max_loras_problems(value: Any, engine: str) -> list[str]:
    """Run-time adapter loading: a whole number, and only on an engine whose API loads adapters."""
    if value is None or value == 0:
        return []
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return [f"max_loras {value!r} is not a whole number >= 0"]
    desc = find(engine)
    if desc is not None and desc.lora_api is None:
        return [f"max_loras: llmgw loads LoRA adapters into {desc.title} only at start; set 0"]
    return []


def _adapter_problems(adapters: Any, engine: str) -> list[str]:
    """LoRA adapters: served names like model names, paths like the model's (cache paths),
    and only on an engine that takes adapters; a `name=path` word is built from both."""
    if not isinstance(adapters, list):
        return ["adapters is not a list"]
    desc = find(engine)
    out = [f"adapters: {desc.title} serves no LoRA adapters"] if adapters and desc and desc.adapters == "none" else []
    for i, a in enumerate(adapters):
        if not isinstance(a, Mapping):
            out.append(f"adapters[{i}] is not a mapping of name, path and rank")
            continue
        name, path, rank = a.get("name"), a.get("path"), a.get("rank")
        if not isinstance(name, str) or not PATTERNS["model"].match(name):
            out.append(f"adapters[{i}].name {name!r} does not match {PATTERNS['model'].pattern}")
        if not isinstance(path, str) or not is_host_path(path):
            out.append(f"adapters[{i}].path {path!r} is not an absolute path without '.' or '..' parts")
        if rank is not None and not (isinstance(rank, int) and not isinstance(rank, bool) and rank > 0):
            out.append(f"adapters[{i}].rank {rank!r} is not a positive whole number")
    return out
