"""Whole Hugging Face repositories on the control side: what `hf://org/repo[@rev]` names, pinned.

A catalog names a repository and, optionally, a revision (a branch, tag or commit) and
include/exclude patterns. `catalog validate` asks the site's endpoint (the Hub or the
`mirror:` in llmgw.yaml, nothing else) which commit the revision names and how big the
selected files are, and records both; `plan` reads that record offline and gives hosts
the *pinned* spec `hf://org/repo@<commit>?include=..&exclude=..`, whose hash names the
cache entry: a moved branch is a new entry and a visible replacement, never new weights
under an old name.

Offline mirrors (olah) answer the model API only with a revision
(`/api/models/ORG/REPO/revision/REV`), so the revision is always resolved that way; file
sizes come from its `siblings` when the server sends them (`?blobs=true` on the Hub),
else from a HEAD of each file at the commit.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from llmgw.errors import WeightsError

if TYPE_CHECKING:  # only annotations here: the planner imports this module, httpx costs it ~0.1 s
    import httpx

HUB = "https://huggingface.co"
_REPO = re.compile(r"^hf://([A-Za-z0-9][A-Za-z0-9._-]{0,95})/([A-Za-z0-9][A-Za-z0-9._-]{0,95})(?:@([A-Za-z0-9._-]{1,200}))?$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# What a host's weights module accepts in a pattern (it splits the spec on ',' '&' '=').
PATTERN = re.compile(r"^[A-Za-z0-9._*?\[\]/-]{1,200}$")


@dataclass(frozen=True)
class RepoSource:
    """`hf://org/repo[@revision]` with the catalog's include/exclude patterns."""

    repo: str  # org/name
    revision: str  # "main" when the source names none
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def spec(self, revision: str | None = None) -> str:
        """The one-string form: catalog key (revision as written) or, given a commit, what hosts fetch."""
        out = f"hf://{self.repo}@{revision or self.revision}"
        query = [f"{k}={','.join(v)}" for k, v in (("include", self.include), ("exclude", self.exclude)) if v]
        return out + ("?" + "&".join(query) if query else "")

    def selects(self, path: str) -> bool:
        """Whether huggingface_hub's allow/ignore patterns keep `path` (same fnmatch rules)."""
        if self.include and not any(fnmatch.fnmatch(path, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatch(path, p) for p in self.exclude)


def is_repo_source(source: str) -> bool:
    """hf://org/repo or hf://org/repo@rev: a whole repository (hf://org/repo/file names one file)."""
    return bool(_REPO.match(source))


def parse_repo(source: str, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> RepoSource:
    m = _REPO.match(source)
    if not m:
        raise WeightsError(f"{source}: not a whole-repository source (hf://org/repo or hf://org/repo@revision)")
    bad = [p for p in (*include, *exclude) if not PATTERN.match(p) or ".." in p]
    if bad:
        raise WeightsError(f"{source}: include/exclude patterns may hold letters, digits and . _ - / * ? [ ] "
                           f"only (no '..'): {bad}")
    revision = m.group(3) or "main"
    if ".." in revision:
        raise WeightsError(f"{source}: the revision {revision!r} holds '..'")
    return RepoSource(f"{m.group(1)}/{m.group(2)}", revision, tuple(include), tuple(exclude))


@dataclass(frozen=True)
class RepoInfo:
    commit: str
    files: dict[str, int | None]  # selected file -> size (None: the server did not say)

    @property
    def size_bytes(self) -> int | None:
        sizes = list(self.files.values())
        return sum(s for s in sizes if s is not None) if all(s is not None for s in sizes) else None


def resolve(src: RepoSource, endpoint: str, client: httpx.Client, token: str | None = None) -> RepoInfo:
    """The commit `src.revision` names and the selected files' sizes, from `endpoint` only."""
    endpoint = endpoint.rstrip("/")
    headers = {"Authorization": f"Bearer {token}"} if token and endpoint.startswith("https://") else {}
    url = f"{endpoint}/api/models/{src.repo}/revision/{quote(src.revision, safe='')}"
    # No redirects: the answer must come from the configured endpoint itself.
    resp = client.get(url, params={"blobs": "true"}, headers=headers, follow_redirects=False)
    if resp.status_code != 200:
        raise WeightsError(f"hf://{src.repo}@{src.revision}: {endpoint} answered HTTP {resp.status_code} "
                           "for the revision", hint="check the repository and revision names, and `mirror:`")
    try:
        doc = resp.json()
        commit = str(doc["sha"])
        siblings = [s for s in doc.get("siblings") or [] if isinstance(s, dict)]
    except (ValueError, KeyError, TypeError):
        raise WeightsError(f"hf://{src.repo}@{src.revision}: {endpoint} sent no revision record") from None
    if not COMMIT.match(commit):
        raise WeightsError(f"hf://{src.repo}@{src.revision}: {endpoint} named {commit!r}, not a commit")
    files: dict[str, int | None] = {}
    for s in siblings:
        name = s.get("rfilename")
        if isinstance(name, str) and src.selects(name):
            size = s.get("size")
            files[name] = size if isinstance(size, int) and size >= 0 else None
    if not files:
        raise WeightsError(f"hf://{src.repo}@{src.revision}: no files left after include/exclude")
    for name, size in files.items():
        if size is None:
            files[name] = _head_size(f"{endpoint}/{src.repo}/resolve/{commit}/{quote(name)}", client, headers)
    return RepoInfo(commit, files)


def _head_size(url: str, client: httpx.Client, headers: dict[str, str]) -> int | None:
    resp = client.head(url, headers=headers, follow_redirects=False)
    # The Hub answers large (LFS) files with a redirect carrying X-Linked-Size.
    for key in ("x-linked-size", "content-length"):
        value = resp.headers.get(key)
        if value and value.isdigit() and (key == "x-linked-size" or resp.status_code == 200):
            return int(value)
    return None
