# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
"""The one definition of llmgw's weights cache names, shared by the host modules
(node_facts, weights) and the control side (planner, weights orphans).

A cache entry is named `<first 16 hex of sha256(source)>-<basename>`, so the control
side knows exactly which entries a catalog wants from the sources alone, and anything
not matching the pattern was put there by an operator and is never touched.
"""

from __future__ import annotations

import hashlib
import re

CACHE_NAME_RE = re.compile(r"^[0-9a-f]{16}-[A-Za-z0-9._-]{1,100}$")
PART_SUFFIX = ".part"


def source_basename(source):
    """The last path segment of a source URL, made safe for a file name.

    A whole Hugging Face repository (hf://org/repo@commit?include=...) is named after
    the repository: its revision and patterns are in the hash, not the name."""
    if source.startswith("hf://"):
        source = source.split("?", 1)[0]
        if source[len("hf://"):].count("/") == 1:
            source = source.split("@", 1)[0]
    tail = source.rstrip("/").rsplit("/", 1)[-1] or "weights"
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", tail)[:100].lstrip(".")
    return safe or "weights"


def cache_name(source):
    """The cache entry name for a source URL (hf://, https://, file://)."""
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]
    return "%s-%s" % (digest, source_basename(source))


def progress_name(name):
    """The file beside a cache entry that tells how far its download has got (JSON)."""
    return "." + name + ".progress"


def is_cache_name(name):
    """True for a finished cache entry name (never a `.part` download or a hidden file)."""
    return bool(CACHE_NAME_RE.match(name)) and not name.endswith(PART_SUFFIX)
