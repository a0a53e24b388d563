"""Where the controller keeps its runtime, and how it checks a commit out without trusting it.

    runtime folder (`--runtime-dir`, default ~/.local/state/llmgw-controller), the controller's own:
        state.json (.lock, .runs.json)  the local state and its runs, or a PostgreSQL state's last copy
        llmgw-engine-keys.secret        the engine key secret (unless $LLMGW_ENGINE_KEY_SECRET is set)
        llmgw-store.sqlite              the default key and quota store
        trees/COMMIT/                   a fresh checkout of each commit planned
    site folder (`-C`), a clone of the site's repository: it fetches the branch and holds the
    commit last applied (or approved), which the demand path reads; nothing in it is runtime.

A commit is only ever site files. Before any checkout the controller lists the commit's tree
(`vet`) and refuses one that holds a path it keeps at run time (a state, runs, lock, secret or
store; `.llmgw/`) or a symbolic link leading out of the tree. New commits are planned in a
fresh folder (`materialize`: `git read-tree` into a private index, `git checkout-index` into an
empty folder): there is nothing there for the checkout to overwrite, and the site folder keeps
the applied commit. Only an applied run moves the site folder, with `git checkout --detach`,
which silently overwrites ignored files, so `overwrites` first refuses a commit that tracks a
path present there untracked (an operator's facts, say): `.gitignore` tricks have nothing left to
reach.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from llmgw.apply.engine_keys import SECRET_FILE
from llmgw.childenv import child_env
from llmgw.errors import LlmgwError

RUNTIME_ENV = "LLMGW_CONTROLLER_RUNTIME_DIR"  # the CLI's --runtime-dir
FULL_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 and SHA-256 repositories
STATE_NAMES = ("state.json", "state.json.lock", "state.json.runs.json", "state.json.runs.json.lock")
STORE_NAME = "llmgw-store.sqlite"


class GitError(LlmgwError):
    pass


class CommitRefused(LlmgwError):
    """A commit the controller will not check out (the message names the path)."""


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120, check=False,
                          env={**child_env(), **(env or {})})  # git and its hooks get no secrets
    if done.returncode != 0:
        raise GitError(f"git {' '.join(args[:2])} in {repo} failed: {(done.stderr or done.stdout).strip()[-400:]}")
    return done.stdout


def default_runtime() -> Path:
    """When neither --runtime-dir nor $LLMGW_CONTROLLER_RUNTIME_DIR names one: XDG's state folder."""
    return Path.home() / ".local" / "state" / "llmgw-controller"


def prepare_runtime(runtime: Path, site_dir: Path) -> Path:
    """The runtime folder, made 0700; refused inside the site folder (a commit could then reach it)."""
    runtime, site_dir = runtime.resolve(), site_dir.resolve()
    if runtime == site_dir or runtime.is_relative_to(site_dir):
        raise LlmgwError(f"the controller's runtime folder {runtime} is inside its site folder {site_dir}",
                         hint=f"give --runtime-dir (or ${RUNTIME_ENV}) a folder outside the site's clone, "
                              "e.g. beside it in the controller's home")
    (runtime / "trees").mkdir(parents=True, exist_ok=True, mode=0o700)
    runtime.chmod(0o700)
    return runtime


def full_commit(commit: str) -> bool:
    return FULL_COMMIT.fullmatch(commit) is not None


def _tree(repo: Path, commit: str) -> Iterator[tuple[str, str, str]]:
    """(mode, object, path) of every entry of `commit`'s tree, recursively."""
    for entry in git(repo, "ls-tree", "-r", "-z", "--full-tree", commit).split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            mode, _kind, obj = meta.split()
            yield mode, obj, path


def runtime_path(path: str) -> bool:
    """Whether `path` (in a commit) is one the controller keeps at run time, wherever in the tree."""
    parts = PurePosixPath(path).parts
    name = parts[-1]
    return ".llmgw" in parts or name in STATE_NAMES or name == SECRET_FILE or name.startswith(STORE_NAME) \
        or name.endswith((".runs.json", ".runs.json.lock"))


def vet(repo: Path, commit: str) -> list[str]:
    """Refuse `commit` when its tree holds a runtime path or a link out of the tree; its paths."""
    if not full_commit(commit):
        raise CommitRefused(f"{commit!r} is not a full commit hash", hint="the controller plans full hashes only")
    short = commit[:12]
    paths = []
    for mode, obj, path in _tree(repo, commit):
        if runtime_path(path):
            raise CommitRefused(
                f"commit {short} holds {path}, a path the controller keeps at run time (a state, its runs, a "
                "lock, a secret or a store): it was not checked out",
                hint="remove it from the branch (`git rm --cached`); the controller keeps its runtime in its own "
                     "folder, never in the repository")
        if mode == "120000":
            target = git(repo, "cat-file", "blob", obj)
            if target.startswith("/") or ".." in PurePosixPath(target).parts:
                raise CommitRefused(f"commit {short} holds {path}, a symbolic link to {target!r} outside the "
                                    "commit: it was not checked out",
                                    hint="commit the file itself, or a link to a path inside the repository")
        paths.append(path)
    return paths


def overwrites(site_dir: Path, paths: list[str], commit: str) -> None:
    """Refuse checking `commit` out in `site_dir` when it tracks a path present there untracked
    (ignored: `git checkout` would overwrite it without a word)."""
    tracked = set(git(site_dir, "ls-files", "-z").split("\0"))
    for path in paths:
        if path not in tracked and os.path.lexists(site_dir / path):
            raise CommitRefused(
                f"commit {commit[:12]} tracks {path}, which is an untracked (ignored) file in the controller's "
                f"site folder {site_dir}: checking it out would overwrite it, so it was not checked out",
                hint="remove the file from the commit, or from the site folder if the commit's copy is meant")


def materialize(repo: Path, commit: str, trees: Path) -> Path:
    """A fresh checkout of `commit` (the caller vets it first) in trees/COMMIT, made once: an empty
    folder, so nothing is overwritten, and no hook or work-tree state of the clone is involved."""
    dest = trees / commit
    if dest.is_dir():
        return dest
    tmp = trees / f".{commit}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o700)
    index = {"GIT_INDEX_FILE": str(tmp / ".git-index")}
    try:
        git(repo, "read-tree", commit, env=index)
        git(repo, f"--work-tree={tmp}", "checkout-index", "--all", env=index)
        (tmp / ".git-index").unlink()
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def prune(trees: Path, keep: set[str]) -> None:
    """Remove the checkouts of commits no longer planned or applied."""
    for entry in trees.iterdir():
        if entry.name not in keep:
            shutil.rmtree(entry, ignore_errors=True)
