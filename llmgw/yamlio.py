"""YAML the way operators write it: round-trip (comments and order kept), with line numbers.

Every file llmgw writes goes through `atomic_write`: a temp file beside the target,
fsync, rename, so a crash leaves the old file or the new one, never half of either.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from llmgw.errors import LlmgwError


class YamlSyntaxError(LlmgwError):
    """A YAML file that does not parse; carries file and line."""

    def __init__(self, path: Path, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}", hint="fix the YAML syntax at that line")
        self.path = path
        self.line = line
        self.problem = problem


def _yaml() -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 4096
    return y


def load_yaml(path: Path) -> Any:
    """Load a YAML file round-trip; syntax errors become YamlSyntaxError with the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LlmgwError(f"cannot read {path}: {exc.strerror}") from None
    return loads_yaml(text, path)


def loads_yaml(text: str, path: Path) -> Any:
    try:
        return _yaml().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        raise YamlSyntaxError(path, line, exc.problem or str(exc)) from None


def dumps_yaml(data: Any) -> str:
    buf = io.StringIO()
    _yaml().dump(data, buf)
    return buf.getvalue()


def line_of(doc: Any, loc: Sequence[str | int]) -> int:
    """1-based line of the deepest node along `loc` that exists in a round-trip document.

    Pydantic error locations follow the data, so walking them through the
    CommentedMap/CommentedSeq tree finds where in the file the problem sits.
    """
    line = 0
    node = doc
    for key in loc:
        if isinstance(node, CommentedMap) and key in node:
            pos = node.lc.key(key)
            line = pos[0] + 1
            node = node[key]
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
            pos = node.lc.item(key)
            line = pos[0] + 1
            node = node[key]
        else:
            break
    if line == 0 and isinstance(doc, CommentedMap | CommentedSeq):
        line = doc.lc.line + 1
    return line


def atomic_write(path: Path, text: str | bytes, mode: int | None = None) -> None:
    """Replace `path` with `text` atomically: temp file in the same folder, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)
