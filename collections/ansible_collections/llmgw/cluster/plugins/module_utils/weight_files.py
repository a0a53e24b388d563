# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""Weights present on a host: llmgw's cache entries and the model files an operator put there.

Pure Python, no Ansible import.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Dict, List, Optional, Set

from ansible_collections.llmgw.cluster.plugins.module_utils.host_io import FactDict

WEIGHT_SUFFIXES = (".gguf", ".safetensors")
# Files that make a folder a Hugging Face-style model folder when beside a config.json.
_HF_WEIGHT_RE = re.compile(r"(\.safetensors|\.gguf|^pytorch_model.*\.bin|^model.*\.bin)$")
PART_SUFFIX = ".part"
# A model folder's file list is reported up to this many files (repositories hold tens).
MAX_FOLDER_FILES = 5000


def _tree_size(path: str) -> int:
    if not os.path.isdir(path):
        try:
            return os.stat(path).st_size
        except OSError:
            return 0
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            if name.endswith(PART_SUFFIX):
                continue
            try:
                total += os.stat(os.path.join(folder, name)).st_size  # follows HF cache symlinks
            except OSError:
                continue
    return total


def _folder_files(path: str) -> Dict[str, int]:
    """Each file under a model folder (relative path, `/`-separated) and its size: what the control
    side checks an operator's copy of a whole repository against. Hidden files and `.part`
    downloads are left out; a snapshot's links (the Hugging Face cache layout) are followed."""
    out: Dict[str, int] = {}
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or name.endswith(PART_SUFFIX):
                continue
            full = os.path.join(folder, name)
            try:
                out[os.path.relpath(full, path).replace(os.sep, "/")] = os.stat(full).st_size
            except OSError:
                continue
            if len(out) >= MAX_FOLDER_FILES:
                return out
    return out


def _is_hf_folder(path: str, files: List[str]) -> bool:
    if "config.json" not in files:
        return False
    for name in files:
        if _HF_WEIGHT_RE.search(name) and not name.endswith(PART_SUFFIX):
            try:
                if os.stat(os.path.join(path, name)).st_size > 0:
                    return True
            except OSError:
                continue
    return False


def find_operator_weights(top: str, max_depth: int = 4, skip: Callable[[str, str], bool] = lambda d, n: False,
                          ) -> List[FactDict]:
    """Model files an operator put under `top`: *.gguf / *.safetensors files, and
    Hugging Face-style folders (config.json beside weight files) as one entry each, with
    their file list (so the Hugging Face cache layout's `models--org--name/snapshots/REV/`
    is found too: its files are links into `blobs/`, followed).

    Empty files, `.part` downloads and hidden folders are not weights.
    """
    found: List[FactDict] = []
    if not os.path.isdir(top):
        return found
    base_depth = top.rstrip("/").count("/")
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not skip(folder, d))
        if folder != top and _is_hf_folder(folder, files):
            size = _tree_size(folder)
            if size > 0:
                found.append({"path": folder, "size_bytes": size, "cache": False, "cache_name": None,
                              "files": _folder_files(folder)})
            dirs[:] = []
            continue
        for name in sorted(files):
            if not name.endswith(WEIGHT_SUFFIXES) or skip(folder, name):
                continue
            path = os.path.join(folder, name)
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            if size > 0:
                found.append({"path": path, "size_bytes": size, "cache": False, "cache_name": None})
        if folder.rstrip("/").count("/") - base_depth >= max_depth:
            dirs[:] = []
    return found


def find_weights(model_dirs: List[str], cache_dir: Optional[str],
                 is_cache_name: Callable[[str], bool]) -> List[FactDict]:
    """Weights present: llmgw's cache entries (named by `is_cache_name`) and operator files.

    In the cache dir, a top-level entry with a cache name is one cache entry (file or
    folder, if not empty); anything else there is looked at like an operator's file.
    A path reached twice (a model dir inside another, or equal to the cache) counts once.
    """
    found: List[FactDict] = []
    seen: Set[str] = set()

    def add(entry: FactDict) -> None:
        real = os.path.realpath(entry["path"])
        if real not in seen:
            seen.add(real)
            found.append(entry)

    cache_real = os.path.realpath(cache_dir) if cache_dir else None
    if cache_dir and os.path.isdir(cache_dir):
        for name in sorted(os.listdir(cache_dir)):
            if not is_cache_name(name):
                continue
            path = os.path.join(cache_dir, name)
            size = _tree_size(path)
            if size > 0:
                add({"path": path, "size_bytes": size, "cache": True, "cache_name": name})

    def in_cache(folder: str, name: str) -> bool:
        return os.path.realpath(folder) == cache_real and is_cache_name(name)

    for top in list(model_dirs) + ([cache_dir] if cache_dir else []):
        for entry in find_operator_weights(top, skip=in_cache):
            add(entry)
    return sorted(found, key=lambda w: str(w["path"]))
