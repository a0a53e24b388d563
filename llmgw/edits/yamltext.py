"""YAML text surgery: change one key or drop one list item in a file's text, and prove it.

Edits are made on the text itself (the lines ruamel locates), not by dumping a reloaded
document, so comments, order, quoting and indentation stay exactly as the operator wrote
them. `prove` then parses the edited text again: it must equal the old data with only the
intended change, or the edit is refused (`UnsafeEdit`) with nothing written.
What to edit (a node's state, a model's scaling) lives in `node_state.py` and `catalog_edits.py`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from llmgw.errors import LlmgwError
from llmgw.yamlio import YamlSyntaxError, atomic_write, loads_yaml

YAML_SUFFIXES = (".yml", ".yaml")
BY_HAND = "make the change by hand; nothing was written"
Path_ = Sequence[str | int]


@dataclass(frozen=True)
class FileEdit:
    """One file's text before and after (None: the file does not exist / is removed)."""

    path: Path
    before: str | None
    after: str | None

    def diff(self, root: Path | None = None) -> str:
        name = str(self.path.relative_to(root)) if root and self.path.is_relative_to(root) else str(self.path)
        lines = difflib.unified_diff((self.before or "").splitlines(keepends=True),
                                     (self.after or "").splitlines(keepends=True),
                                     fromfile=f"a/{name}" if self.before is not None else "/dev/null",
                                     tofile=f"b/{name}" if self.after is not None else "/dev/null")
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

    def write(self) -> None:
        if self.after is None:
            self.path.unlink()
        else:
            atomic_write(self.path, self.after)


class UnsafeEdit(LlmgwError):
    """The text could not be changed in place with certainty; the operator edits it by hand."""


# -- plain data, for proving an edit ---------------------------------------------------------

def plain(node: Any) -> Any:
    """ruamel's commented containers as plain dicts and lists, for comparing data."""
    if isinstance(node, dict):
        return {k: plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    return node


def at_path(doc: Any, path: Path_) -> Any:
    """The node at `path` (keys and indexes) inside a parsed document."""
    for key in path:
        doc = doc[key]
    return doc


def parse_yaml(text: str, path: Path) -> Any:
    """`text` parsed; invalid YAML is an UnsafeEdit (the edit broke it), not a syntax error."""
    try:
        return loads_yaml(text, path)
    except YamlSyntaxError as exc:
        raise UnsafeEdit(f"{path}: editing it produced invalid YAML ({exc.problem})",
                         hint=BY_HAND) from None


def prove(path: Path, before: str, after: str, expect: Callable[[Any], Any]) -> None:
    """The edited text must parse to exactly `expect(old data)`: the change and nothing else."""
    want = expect(plain(parse_yaml(before, path)))
    got = plain(parse_yaml(after, path))
    if got != want:
        raise UnsafeEdit(f"{path}: llmgw could not make this change without touching anything else",
                         hint=BY_HAND)


# -- text surgery -----------------------------------------------------------------------------

def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def is_content(line: str) -> bool:
    """A line that holds YAML (not blank, not only a comment)."""
    s = line.strip()
    return bool(s) and not s.startswith("#")


def _collection_end(line: str, col: int) -> int:
    """Where the flow collection opening at `col` closes (exclusive), on the same line."""
    depth, quote = 0, ""
    for i in range(col, len(line)):
        ch = line[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    raise UnsafeEdit("a flow collection spans lines", hint=BY_HAND)


def _scalar_end(line: str, col: int, flow: bool) -> int:
    """Where the scalar (or same-line flow collection) starting at `col` ends (exclusive)."""
    if col >= len(line):
        return col
    q = line[col]
    if flow and q in "{[":
        return _collection_end(line, col)
    if q in "\"'":
        i = col + 1
        while i < len(line):
            if q == "'" and line[i] == "'" and line[i + 1:i + 2] == "'":
                i += 2
                continue
            if q == '"' and line[i] == "\\":
                i += 2
                continue
            if line[i] == q:
                return i + 1
            i += 1
        raise UnsafeEdit("a quoted value spans lines", hint=BY_HAND)
    stops = [len(line.rstrip("\n"))]
    m = re.search(r"\s#", line[col:])
    if m:
        stops.append(col + m.start())
    if flow:
        for ch in ",}]":
            j = line.find(ch, col)
            if j >= 0:
                stops.append(j)
    end = min(stops)
    while end > col and line[end - 1] in " \t":
        end -= 1
    return end


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The last content line (index) of a block whose entries sit at `indent`, from `start` on."""
    last = start
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if not is_content(line):
            continue
        ind = _indent(line)
        # Deeper lines belong to the last entry; so does a list written at the key's own indent.
        if ind > indent or (ind == indent and line.lstrip().startswith("-")):
            last = i
            continue
        break
    return last


def _ensure_nl(line: str) -> str:
    return line if line.endswith("\n") else line + "\n"


def set_key(text: str, path: Path, mapping_at: Path_, key: str, value: str) -> str:
    """`text` with `key: value` set in the mapping at `mapping_at` (value as YAML source).

    An existing scalar is replaced where it stands; a new key goes after the mapping's last
    entry (block style) or before its closing brace (flow style); a host with no vars
    (`gpu-01:`) gets its first one on a new line.
    """
    doc = parse_yaml(text, path)
    lines = text.splitlines(keepends=True)
    parent_path, last = list(mapping_at[:-1]), mapping_at[-1] if mapping_at else None
    mapping = at_path(doc, mapping_at)
    if mapping is None:
        parent = at_path(doc, parent_path)
        if not isinstance(parent, CommentedMap) or parent.fa.flow_style():
            raise UnsafeEdit(f"{path}: cannot add {key} here", hint=BY_HAND)
        kl, kc = parent.lc.key(last)
        line = lines[kl]
        colon = line.index(":", kc + len(str(last)))
        rest = line[colon + 1:]
        comment = rest[rest.index("#"):] if "#" in rest else ""
        body = rest[:len(rest) - len(comment)] if comment else rest
        if body.strip() not in ("", "~", "null", "Null", "NULL"):
            raise UnsafeEdit(f"{path}: cannot add {key} to {last}", hint=BY_HAND)
        step = 2
        for sib in parent.values():
            if isinstance(sib, CommentedMap) and not sib.fa.flow_style() and len(sib):
                step = sib.lc.key(next(iter(sib)))[1] - kc
                break
        head = line[:colon + 1] + (" " + comment.rstrip("\n") if comment else "")
        lines[kl] = head.rstrip() + "\n"
        lines.insert(kl + 1, f"{' ' * (kc + step)}{key}: {value}\n")
        return "".join(lines)
    if not isinstance(mapping, CommentedMap):
        raise UnsafeEdit(f"{path}: expected a mapping at {'.'.join(map(str, mapping_at))}",
                         hint=BY_HAND)
    flow = bool(mapping.fa.flow_style())
    if key in mapping:
        if mapping[key] is None or isinstance(mapping[key], dict | list):
            raise UnsafeEdit(f"{path}: {key} is not a single value", hint=BY_HAND)
        vl, vc = mapping.lc.value(key)
        line = lines[vl]
        end = _scalar_end(line, vc, flow)
        lines[vl] = line[:vc] + value + line[end:]
        return "".join(lines)
    if len(mapping) == 0:
        parent = at_path(doc, parent_path)
        vl, vc = parent.lc.value(last)
        line = lines[vl]
        m = re.match(r"\{\s*\}", line[vc:])
        if not m:
            raise UnsafeEdit(f"{path}: cannot add {key} here", hint=BY_HAND)
        lines[vl] = line[:vc] + f"{{{key}: {value}}}" + line[vc + m.end():]
        return "".join(lines)
    last_key = list(mapping)[-1]
    if flow:
        vl, vc = mapping.lc.value(last_key)
        line = lines[vl]
        end = _scalar_end(line, vc, True)
        lines[vl] = line[:end] + f", {key}: {value}" + line[end:]
        return "".join(lines)
    kl, kc = mapping.lc.key(last_key)
    end = _block_end(lines, kl, kc)
    lines[end] = _ensure_nl(lines[end])
    lines.insert(end + 1, f"{' ' * kc}{key}: {value}\n")
    return "".join(lines)


def remove_key(text: str, path: Path, mapping_at: Path_, key: str) -> str:
    """`text` without `key` (a single value) in the block mapping at `mapping_at`; the lines
    it spans go, comments on other lines stay. Absent: `text` unchanged."""
    doc = parse_yaml(text, path)
    mapping = at_path(doc, mapping_at)
    if not isinstance(mapping, CommentedMap) or key not in mapping:
        return text
    if mapping.fa.flow_style() or len(mapping) == 1 or isinstance(mapping[key], dict | list):
        raise UnsafeEdit(f"{path}: cannot remove {key} here", hint=BY_HAND)
    lines = text.splitlines(keepends=True)
    kl, kc = mapping.lc.key(key)
    if lines[kl][:kc].strip():  # `host: {key: ...}` style sharing its line with another key
        raise UnsafeEdit(f"{path}: cannot remove {key} here", hint=BY_HAND)
    del lines[kl:_block_end(lines, kl, kc) + 1]
    return "".join(lines)


def remove_item(text: str, path: Path, seq_at: Path_, index: int) -> str:
    """`text` without item `index` of the block sequence at `seq_at`, with its comments inside it."""
    doc = parse_yaml(text, path)
    seq = at_path(doc, seq_at)
    if not isinstance(seq, CommentedSeq) or seq.fa.flow_style():
        raise UnsafeEdit(f"{path}: expected a block list at {'.'.join(map(str, seq_at))}",
                         hint=BY_HAND)
    lines = text.splitlines(keepends=True)
    il, ic = seq.lc.item(index)
    dash = ic - 2 if lines[il][ic - 2:ic].startswith("-") else _indent(lines[il])
    if not lines[il].lstrip().startswith("-"):
        raise UnsafeEdit(f"{path}: cannot find the list item", hint=BY_HAND)
    # Comment lines right above the item (no blank line between) introduce it: they go with it.
    start = il
    while start > 0 and lines[start - 1].strip().startswith("#") and _indent(lines[start - 1]) >= dash:
        start -= 1
    end = il + 1
    while end < len(lines):
        line = lines[end]
        if (is_content(line) or line.strip().startswith("#")) and _indent(line) <= dash:
            break
        end += 1
    # Keep the blank lines and comments that introduce what follows; drop only the item's own.
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    while end < len(lines) and not lines[end].strip():
        end += 1
    through_end = end >= len(lines)
    del lines[start:end]
    if through_end:  # the last item went: leave no blank lines trailing
        while lines and not lines[-1].strip():
            lines.pop()
    return "".join(lines)
