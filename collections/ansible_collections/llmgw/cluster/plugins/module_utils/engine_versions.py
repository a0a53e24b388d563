# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""The inference engines installed on a host (llama.cpp, vLLM, SGLang) and their versions.

Pure Python, no Ansible import; the command runner is an argument (see host_io).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from typing import List, Optional

from ansible_collections.llmgw.cluster.plugins.module_utils.host_io import FactDict, Run

_VERSION_RE = re.compile(r"version:?\s*(\S.*)", re.IGNORECASE)

# The engines llmgw installs, as its engine descriptors (llmgw.engines) say: this module
# runs on the hosts and cannot import llmgw, so tests/engines/test_descriptor.py keeps
# these equal to them. A binary engine's program (it prints its version); the Python
# engines, each a virtualenv <engine_dir>/<name> holding the distribution of that name.
BINARY_ENGINES = {"llamacpp": "llama-server"}
PYTHON_ENGINES = ("vllm", "sglang")


def _first_version(text: str) -> Optional[str]:
    match = _VERSION_RE.search(text)
    if match:
        return match.group(1).strip()[:80]  # "0.5.0-dev (build 1, commit 0c1e570)"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0][:80] if lines else None


def find_program(name: str, search_dirs: List[str]) -> Optional[str]:
    for folder in search_dirs:
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return shutil.which(name)


def _dist_version(dist: str) -> Optional[str]:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # Python < 3.8
        return None
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _newest(paths: List[str]) -> Optional[str]:
    def mtime(path: str) -> float:
        try:
            return os.stat(path).st_mtime
        except OSError:
            return 0.0

    existing = [p for p in paths if os.path.isfile(p) and os.access(p, os.X_OK)]
    return max(existing, key=mtime) if existing else None


def _venv_version(venv: str, dist: str) -> Optional[str]:
    """A package's version in a virtualenv, from its dist-info folder name (no process)."""
    pattern = os.path.join(venv, "lib", "python3*", "site-packages", "%s-*.dist-info" % dist)
    for folder in sorted(glob.glob(pattern), reverse=True):
        name = os.path.basename(folder)[len(dist) + 1:-len(".dist-info")]
        if name:
            return name
    return None


def engine_versions(run: Run, search_dirs: List[str], engine_dir: Optional[str] = None) -> FactDict:
    """Installed engines and their versions, keyed like the catalog (llamacpp, vllm, sglang).

    Where llmgw's engine role installs them first (`engine_dir`: llama-server builds in
    `llamacpp/<checksum>/`, the newest answering; vLLM and SGLang virtualenvs in
    `vllm/` and `sglang/`), then `search_dirs` and PATH for llama-server and vllm, then
    the Python packages of the interpreter running this module. llama.cpp's version is
    what `llama-server --version` prints. An engine not found is absent.
    """
    found: FactDict = {}
    for engine, binary in BINARY_ENGINES.items():
        builds = glob.glob(os.path.join(engine_dir, engine, "*", binary)) if engine_dir else []
        program = _newest(builds) or find_program(binary, search_dirs)
        if program:
            rc, out, err = run([program, "--version"])
            text = (out or "") + "\n" + (err or "")
            version = _first_version(text) if rc == 0 or "version" in text else None
            found[engine] = version or "unknown"
    for engine in PYTHON_ENGINES:
        version = _venv_version(os.path.join(engine_dir, engine), engine) if engine_dir else None
        if version is None:
            version = _dist_version(engine)
        program = find_program(engine, search_dirs) if engine == "vllm" and version is None else None
        if program:
            rc, out, err = run([program, "--version"])
            if rc == 0:
                version = _first_version(out or err)
        if version:
            found[engine] = version
    return found
