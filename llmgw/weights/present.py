"""Weights where they are: an operator's copy of a source in a host's model dir, served in place.

The rule the original kept: use the weights where they are, without owning the storage. A
copy an operator put under one of the host's `llmgw_model_dirs` (a filer, an rsync, an
exported image) is served from that path; apply fetches nothing for it and never writes
there, and GC never touches it (it has no cache name). What counts as a copy of a source:

- `file:///PATH`: the file or folder at PATH itself;
- one file (`hf://org/repo/FILE`, `https://.../FILE`): a file named FILE, of the source's
  size when `catalog validate` recorded one;
- a whole repository pinned to a commit (`hf://org/repo@COMMIT`): the Hugging Face cache
  layout's `models--org--repo/snapshots/COMMIT/` folder, or a plain folder named after the
  repository with `config.json` and weights; when the pin records the selected files and
  their sizes, the folder must hold every one of them at that size (else at least the
  pin's total size).

Everything else (a copy outside the model dirs, a name that matches but a size that does
not, a path an engine's unit could not be given) is not a copy: apply downloads into the
cache instead, and the disk filter counts it. Pure functions over facts: the planner asks.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping
from urllib.parse import unquote, urlparse

from llmgw.engines.entry import PATTERNS
from llmgw.facts import Weights
from llmgw.weights.hub import COMMIT, is_repo_source

_MODEL_PATH = PATTERNS["model_path"]  # what a shard entry's model_path may be: the host checks the same
_HF_CACHE = re.compile(r"(?:^|/)(models--[A-Za-z0-9._-]+--[A-Za-z0-9._-]+/snapshots/[A-Za-z0-9._-]+)$")

Key = tuple[str, str]  # ("path" | "base" | "hfcache", value): how a copy is looked up


def _repo_and_commit(source: str) -> tuple[str, str] | None:
    """(org/repo, commit) of a whole repository pinned to a commit; None for anything else."""
    bare = source.partition("?")[0]
    if not is_repo_source(bare) or "@" not in bare:
        return None
    repo, _, rev = bare[len("hf://"):].partition("@")
    return (repo, rev) if COMMIT.match(rev) else None


def source_keys(source: str) -> list[Key]:
    """The keys an operator's copy of `source` is found under."""
    parsed = urlparse(source)
    if parsed.scheme == "file":
        return [("path", posixpath.normpath(unquote(parsed.path)))]
    if is_repo_source(source.partition("?")[0]):
        pinned = _repo_and_commit(source)
        if pinned is None:  # not pinned: which snapshot is wanted is not known, so none is
            return []
        repo, commit = pinned
        org, name = repo.split("/", 1)
        return [("hfcache", f"models--{org}--{name}/snapshots/{commit}"), ("base", name)]
    tail = source.partition("?")[0].rstrip("/").rsplit("/", 1)[-1]
    return [("base", tail)] if tail else []


def copy_keys(path: str) -> Iterator[Key]:
    """The keys an operator's file or folder at `path` is found under."""
    yield "path", path
    yield "base", path.rstrip("/").rsplit("/", 1)[-1]
    m = _HF_CACHE.search(path.rstrip("/"))
    if m:
        yield "hfcache", m.group(1)


def is_model_path(path: str) -> bool:
    """Whether a shard entry may carry `path` as its model_path: the shape the host's shard check
    accepts (llmgw.engines.entry), no `.`/`..` parts."""
    return bool(_MODEL_PATH.match(path)) and not {".", ".."} & set(path.split("/"))


def servable_path(path: str, model_dirs: list[str]) -> bool:
    """Whether a shard may be served from `path`: a model path strictly under a model dir."""
    if not is_model_path(path):
        return False
    for d in model_dirs:
        root = posixpath.normpath(d).rstrip("/")
        if root and path.startswith(root + "/"):
            return True
    return False


def is_copy(found: Weights, source: str, size: int | None, files: Mapping[str, int | None] | None) -> bool:
    """Whether the operator's `found` (already matched by a key of `source`) is a whole copy of it.

    `size` is the source's recorded size and `files` a whole repository's selected files and
    sizes (None: not recorded, then the name is all there is to go by)."""
    if found.cache:
        return False
    if _repo_and_commit(source) is not None:
        if not files:  # no file list recorded: at least as much as the pin's total (extra files are fine)
            return size is None or found.size_bytes >= size
        if found.files is None:  # facts from before file lists were gathered: not checkable, so fetch
            return False
        return all(name in found.files and (want is None or found.files[name] == want)
                   for name, want in files.items())
    return size is None or found.size_bytes == size

