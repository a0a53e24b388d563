"""YAML the way operators write it: round-trip (comments and order kept), with line numbers.

Every file llmgw reads may come from an untrusted pull request (a GitOps site runs
`catalog validate` and `plan` before anyone has read it), so reading is bounded: files
over `MAX_FILE_BYTES` are refused unread, text must be UTF-8, and YAML is checked event
by event (iteratively, before anything is built) for nesting deeper than `MAX_DEPTH`,
for anchors and aliases that would expand past `MAX_NODES` (a "billion laughs"), and,
where the caller asks for plain data, for tags such as `!!python/object`. Every refusal
is a `FileError` naming the file and line, never a traceback.

Every file llmgw writes goes through `atomic_write`: a temp file beside the target,
fsync, rename, so a crash leaves the old file or the new one, never half of either.

Why long: the fast plain reader (libyaml events) and ruamel's round trip share the bounds
(`_check_events`) and `line_of`; split, the fast one could drift from the checks it relies on.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import (
    CommentedMap,
    CommentedOrderedMap,
    CommentedSeq,
    CommentedSet,
    TaggedScalar,
)
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from llmgw.errors import LlmgwError

MAX_FILE_BYTES = 8 * 1024 * 1024  # no catalog, site or facts file comes near this
MAX_DEPTH = 64  # nesting levels of mappings and sequences
MAX_NODES = 1_000_000  # values in a document with every alias expanded


class FileError(LlmgwError):
    """A file llmgw refuses to read as it is (too large, not UTF-8, not valid); carries file and line."""

    def __init__(self, path: Path, line: int, problem: str, *, hint: str | None = None) -> None:
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {problem}", hint=hint or "fix the file at that line")
        self.path = path
        self.line = line
        self.problem = problem


class YamlSyntaxError(FileError):
    """A YAML file that does not parse (or nests, expands or tags beyond what llmgw reads)."""

    def __init__(self, path: Path, line: int, problem: str) -> None:
        super().__init__(path, line, problem, hint="fix the YAML syntax at that line")


def read_text(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> str:
    """A UTF-8 text file of at most `max_bytes`; anything else is a FileError with the line."""
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise LlmgwError(f"cannot read {path}: {exc.strerror}") from None
    return decode_text(data, path, max_bytes=max_bytes)


def decode_text(data: bytes, path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> str:
    if len(data) > max_bytes:
        raise FileError(path, 0, f"is larger than {max_bytes // (1024 * 1024)} MiB; llmgw does not read files "
                                 "this large", hint="replace the file with the one llmgw expects")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise FileError(path, line, f"is not UTF-8 text: byte 0x{data[exc.start]:02x} at column {column}",
                        hint="save the file as UTF-8") from None


def _yaml() -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 4096
    return y


def load_yaml(path: Path, *, plain: bool = False) -> Any:
    """Load a YAML file round-trip; every problem is a FileError with the line (see `loads_yaml`)."""
    return loads_yaml(read_text(path), path, plain=plain)


def loads_yaml(text: str, path: Path, *, plain: bool = False) -> Any:
    """Parse YAML round-trip, after checking its size, depth and alias expansion.

    `plain`: the document must be plain data, so explicit tags (`!!python/object`,
    `!vault`, `!!binary`) are refused. Files llmgw only edits (an inventory) keep theirs.
    """
    if len(text) > MAX_FILE_BYTES:
        raise YamlSyntaxError(path, 0, f"is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; "
                                       "llmgw does not read files this large")
    _check_brackets(text, path)
    if plain:
        fast = _plain_fast(text, path)
        if fast is not _NOT_PLAIN:
            return fast
    try:
        doc = _yaml().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        raise YamlSyntaxError(path, line, exc.problem or str(exc)) from None
    except YAMLError as exc:  # e.g. a reader error: a character YAML does not allow
        position = getattr(exc, "position", None)
        line = text.count("\n", 0, position) + 1 if isinstance(position, int) else 0
        raise YamlSyntaxError(path, line, str(exc).splitlines()[0]) from None
    except RecursionError:  # block nesting deeper than the composer's recursion: find the line
        _check_events(text, path, plain=plain)
        raise YamlSyntaxError(path, 0, f"nests deeper than {MAX_DEPTH} levels; llmgw files are not that deep") from None
    except (ValueError, TypeError, OverflowError) as exc:  # a tagged value that cannot be built (`!!int x`)
        line = _check_events(text, path, plain=plain)
        raise YamlSyntaxError(path, line, f"a value cannot be read: {exc}") from None
    if _check_doc(doc, path, plain=plain) > MAX_NODES:
        _check_events(text, path, plain=plain)  # finds the line of the alias that goes past it
        raise YamlSyntaxError(path, 0, f"expands to more than {MAX_NODES:,} values through its aliases (*name); "
                                       "write the values out or use fewer aliases")
    return doc


class LinedMap(dict[Any, Any]):
    """A mapping read by the fast plain reader, with the line of itself and of each key."""

    line: int
    key_lines: dict[Any, int]


class LinedSeq(list[Any]):
    """A sequence read by the fast plain reader, with the line of itself and of each item."""

    line: int
    item_lines: list[int]


_NOT_PLAIN = object()  # what the fast reader answers when ruamel must read the text
# Plain scalars the fast reader types itself, exactly as ruamel's YAML 1.2 does; any other
# plain scalar that could be a number, a date or a special float goes to ruamel.
_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)\.[0-9]+")
# Wider than any int, float or sexagesimal pattern of YAML 1.1 or 1.2 (ruamel's resolver),
# so "30m" or "v1" are text here as there, and "1_000", "0o17", "1e3", ".inf", "1:30" go to ruamel.
_NUMBERISH = re.compile(r"[-+]?(?:\.[0-9_]*|[0-9][0-9_]*(?:[.:][0-9_]*)*)(?:[eE][-+]?[0-9]+)?"
                        r"|[-+]?0[xXoObB][0-9a-fA-F_]+|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
_DATE = re.compile(r"[0-9]{4}-[0-9]")
_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}


def _plain_fast(text: str, path: Path) -> Any:
    """Plain data read from libyaml's events (PyYAML's C parser), several times faster than
    ruamel's round trip, with the same bounds (size and brackets checked by the caller,
    depth and alias expansion by `_check_events` on the same events) and the same lines
    for `line_of`. Only for what both read alike: anything with a tag, an anchor or alias,
    a `%YAML` directive, several documents, a merge key, a duplicate or non-scalar key, or a
    plain scalar ruamel might type differently (leading zeros, underscores, exponents,
    dates, .inf) returns `_NOT_PLAIN`, and ruamel reads it, with its own errors. Broken YAML
    goes to ruamel too, so its messages are unchanged."""
    if "%YAML" in text:
        return _NOT_PLAIN
    pyyaml: Any = importlib.import_module("yaml")
    loader = getattr(pyyaml, "CSafeLoader", None)
    if loader is None:
        return _NOT_PLAIN
    try:
        events = list(pyyaml.parse(text, Loader=loader))
    except pyyaml.YAMLError:
        return _NOT_PLAIN
    if _check_events(text, path, plain=False, events=events):
        return _NOT_PLAIN  # an explicit tag: ruamel decides what it means
    try:
        return _build(events, pyyaml)
    except (_Fallback, TypeError):  # TypeError: an unhashable key
        return _NOT_PLAIN


def _scalar(event: Any) -> Any:
    value: str = event.value
    if event.style:  # quoted or block: text as written (plain is None, or "" from libyaml)
        return value
    if value in _NULLS:
        return None
    if value in _BOOLS:
        return _BOOLS[value]
    if _INT.fullmatch(value):
        return int(value)
    if _FLOAT.fullmatch(value):
        return float(value)
    if _NUMBERISH.fullmatch(value) or _DATE.match(value) or value in ("<<", "="):  # merge and value keys
        raise _Fallback
    return value


class _Fallback(Exception):
    pass


def _build(events: list[Any], pyyaml: Any) -> Any:
    """LinedMap/LinedSeq/scalars from the event stream, without recursion."""
    scalar, map_start, seq_start = pyyaml.ScalarEvent, pyyaml.MappingStartEvent, pyyaml.SequenceStartEvent
    ends = (pyyaml.MappingEndEvent, pyyaml.SequenceEndEvent)
    skip = (pyyaml.StreamStartEvent, pyyaml.StreamEndEvent, pyyaml.DocumentEndEvent)
    stack: list[LinedMap | LinedSeq] = []
    keys: list[Any] = []  # per open mapping: the key waiting for its value (_NOT_PLAIN: none)
    root: Any = _NOT_PLAIN
    documents = 0
    # Plain scalars repeat (every key of every model, engine names, counts): type each
    # distinct one once. The values are immutable, so sharing them is safe.
    typed: dict[str, Any] = {}
    for ev in events:
        if type(ev) is scalar and ev.anchor is None and stack:  # most events: a value or key
            if ev.style:
                value = ev.value
            else:
                value = typed.get(ev.value, _NOT_PLAIN)
                if value is _NOT_PLAIN:
                    value = typed[ev.value] = _scalar(ev)
            top = stack[-1]
            if isinstance(top, LinedMap) and keys[-1] is _NOT_PLAIN:
                if value in top:
                    raise _Fallback  # ruamel refuses duplicate keys, with its message
                keys[-1] = value
                top.key_lines[value] = ev.start_mark.line + 1
            else:
                _place(top, keys, value, ev)
            continue
        if isinstance(ev, skip):
            continue
        if isinstance(ev, pyyaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise _Fallback  # ruamel refuses a second document, in its words
            continue
        if isinstance(ev, ends):
            done = stack.pop()  # already placed in its parent when it opened
            keys.pop()
            if not stack:
                root = done
            continue
        if getattr(ev, "anchor", None) is not None or isinstance(ev, pyyaml.AliasEvent):
            raise _Fallback
        line = ev.start_mark.line + 1
        if isinstance(ev, scalar):  # a whole document of one value: every other one is above
            root = _scalar(ev)
            continue
        out: LinedMap | LinedSeq
        if isinstance(ev, map_start):
            out = LinedMap()
            out.key_lines = {}
        elif isinstance(ev, seq_start):
            out = LinedSeq()
            out.item_lines = []
        else:
            raise _Fallback
        out.line = line
        if stack:
            top = stack[-1]
            if isinstance(top, LinedMap) and keys[-1] is _NOT_PLAIN:
                raise _Fallback  # a mapping or sequence as a key
            _place(top, keys, out, ev)
        stack.append(out)
        keys.append(_NOT_PLAIN)
    return None if root is _NOT_PLAIN else root


def _place(top: LinedMap | LinedSeq, keys: list[Any], value: Any, ev: Any) -> None:
    """Put a value (a collection as soon as it opens: its items follow) under the pending key or at the end."""
    if isinstance(top, LinedMap):
        top[keys[-1]] = value
        keys[-1] = _NOT_PLAIN
    else:
        top.append(value)
        top.item_lines.append(ev.start_mark.line + 1)


def _where(parent: Any, key: Any) -> int:
    """The line of `parent[key]` in a round-trip document (0 if not known)."""
    try:
        if isinstance(parent, CommentedMap):
            return int(parent.lc.key(key)[0]) + 1
        if isinstance(parent, CommentedSeq):
            return int(parent.lc.item(key)[0]) + 1
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    return 0


def _check_doc(doc: Any, path: Path, *, plain: bool) -> int:
    """Check the depth and (if `plain`) tags of a loaded document, and return its size with
    every alias expanded. Aliases make it a graph whose nodes are shared: each is sized once."""
    best: dict[int, int] = {}  # id -> deepest depth it was reached at
    stack: list[tuple[Any, int, Any, Any]] = [(doc, 0, None, None)]
    while stack:
        node, depth, parent, key = stack.pop()
        if not isinstance(node, dict | list):
            if plain and isinstance(node, TaggedScalar | bytes | CommentedSet):
                raise YamlSyntaxError(path, _where(parent, key), "a tag (!...) is not allowed; llmgw reads plain "
                                                                  "data (remove the tag)")
            continue
        depth += 1
        if depth > MAX_DEPTH:
            raise YamlSyntaxError(path, _where(parent, key), f"nests deeper than {MAX_DEPTH} levels; llmgw files "
                                                             "are not that deep")
        if best.get(id(node), 0) >= depth:
            continue
        best[id(node)] = depth
        if plain:
            tag = getattr(getattr(node, "tag", None), "value", None)
            if tag is not None or isinstance(node, CommentedOrderedMap):
                raise YamlSyntaxError(path, _where(parent, key), f"the tag {tag or '!!omap'} is not allowed; "
                                                                 "llmgw reads plain data (remove the tag)")
        if isinstance(node, dict):
            stack.extend((v, depth, node, k) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, depth, node, i) for i, v in enumerate(node))
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:  # recursion is bounded: the depth was checked above
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            return 1
        if id(node) not in sizes:
            sizes[id(node)] = 1 + sum(size(c) for c in children)
        return sizes[id(node)]

    return size(doc)


_BRACKETS = re.compile(r"[\[\]{}]")


def _check_brackets(text: str, path: Path) -> None:
    """Refuse deep flow nesting (`[[[[...`) before the parser sees it: YAML's scanner keeps
    state per open bracket and slows down quadratically with their number. Brackets in
    quoted strings count too, which no llmgw file needs this many of."""
    depth = 0
    for m in _BRACKETS.finditer(text):
        depth = depth + 1 if m.group() in "[{" else max(0, depth - 1)
        if depth > MAX_DEPTH:
            line = text.count("\n", 0, m.start()) + 1
            raise YamlSyntaxError(path, line, f"nests deeper than {MAX_DEPTH} levels; llmgw files are not that deep")


def check_yaml_file(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> None:
    """Check a YAML file llmgw does not load itself (an inventory file Ansible will read) for
    size, UTF-8, depth and alias expansion, quickly (libyaml's parser where PyYAML has it);
    syntax is left to the reader. Raises FileError."""
    text = read_text(path, max_bytes=max_bytes)
    _check_brackets(text, path)
    pyyaml: Any = importlib.import_module("yaml")
    loader = getattr(pyyaml, "CSafeLoader", pyyaml.SafeLoader)
    try:
        _check_events(text, path, plain=False, events=pyyaml.parse(text, Loader=loader))
    except pyyaml.YAMLError:
        return  # not YAML (an INI file) or broken YAML: Ansible says which


def _check_events(text: str, path: Path, *, plain: bool, events: Iterable[Any] | None = None) -> int:
    """Walk the parser's events (no recursion, nothing built): refuse what `loads_yaml` promises
    to refuse. Returns the line of the first explicit tag (0 if none) for later errors.
    `events`: another parser's (PyYAML's); its event classes have the same names."""
    depth = 0
    expanded = 0
    open_sizes: list[tuple[int, str | None]] = []  # per open collection: nodes so far, its anchor
    sizes: dict[str, int] = {}  # anchor -> nodes it stands for
    first_tag = 0
    kinds_of: dict[type, frozenset[str]] = {}  # per event class: its class names, worked out once
    scalar_class: type | None = None  # the plain scalar's class, once seen: most events
    for event in _yaml().parse(text) if events is None else events:
        cls = type(event)
        if cls is scalar_class and event.anchor is None and getattr(event, "ctag", None) is None and (
                getattr(event, "tag", None) in (None, "!")):
            # The common case, counted as the general one below counts it: one value, no tag.
            expanded += 1
            if expanded > MAX_NODES:
                raise _too_many(path, event)
            if open_sizes:
                parent, parent_anchor = open_sizes[-1]
                open_sizes[-1] = (parent + 1, parent_anchor)
            continue
        kinds = kinds_of.get(cls)
        if kinds is None:
            kinds = kinds_of[cls] = frozenset(c.__name__ for c in cls.__mro__)
            if "ScalarEvent" in kinds:
                scalar_class = cls
        line = event.start_mark.line + 1 if event.start_mark is not None else 0
        if "NodeEvent" in kinds and "AliasEvent" not in kinds:
            tag = getattr(event, "ctag", None) or getattr(event, "tag", None)
            if tag is not None and str(tag) != "!":
                first_tag = first_tag or line
                if plain:
                    raise YamlSyntaxError(path, line, f"the tag {tag} is not allowed; llmgw reads plain data "
                                                      "(remove the tag)")
        size = 0
        if "ScalarEvent" in kinds:
            size = 1
            if event.anchor:
                sizes[str(event.anchor)] = 1
        elif "AliasEvent" in kinds:
            size = sizes.get(str(event.anchor), 1)
        elif "CollectionStartEvent" in kinds:
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlSyntaxError(path, line, f"nests deeper than {MAX_DEPTH} levels; llmgw files are "
                                                  "not that deep")
            expanded += 1
            open_sizes.append((1, str(event.anchor) if event.anchor else None))
            continue
        elif "CollectionEndEvent" in kinds:
            depth -= 1
            size, anchor = open_sizes.pop()
            if anchor is not None:
                sizes[anchor] = size
            if open_sizes:
                parent, parent_anchor = open_sizes[-1]
                open_sizes[-1] = (parent + size, parent_anchor)
            continue
        else:
            continue
        expanded += size
        if expanded > MAX_NODES:
            raise _too_many(path, event)
        if open_sizes:
            parent, parent_anchor = open_sizes[-1]
            open_sizes[-1] = (parent + size, parent_anchor)
    return first_tag


def _too_many(path: Path, event: Any) -> YamlSyntaxError:
    line = event.start_mark.line + 1 if event.start_mark is not None else 0
    return YamlSyntaxError(path, line, f"expands to more than {MAX_NODES:,} values through its aliases "
                                       "(*name); write the values out or use fewer aliases")


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
        if isinstance(node, LinedMap) and key in node:
            line = node.key_lines[key]
            node = node[key]
        elif isinstance(node, LinedSeq) and isinstance(key, int) and 0 <= key < len(node):
            line = node.item_lines[key]
            node = node[key]
        elif isinstance(node, CommentedMap) and key in node:
            pos = node.lc.key(key)
            line = pos[0] + 1
            node = node[key]
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
            pos = node.lc.item(key)
            line = pos[0] + 1
            node = node[key]
        else:
            break
    if line == 0 and isinstance(doc, LinedMap | LinedSeq):
        line = doc.line
    elif line == 0 and isinstance(doc, CommentedMap | CommentedSeq):
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


def json_text(data: Any, *, presorted: bool = False, default: Callable[[Any], Any] | None = None) -> str:
    """`json.dumps(data, indent=2, sort_keys=True) + "\\n"`, byte for byte, several times faster.

    Python's JSON encoder runs in Python when it indents (seconds for a 4,096-host plan);
    pydantic-core's runs in Rust. Keys are sorted here, then Rust writes the text. It
    writes non-ASCII characters, DEL, floats and non-string keys differently, so data
    holding any of them goes to `json.dumps`, which stays the reference. `presorted`: every
    dict's keys are sorted already (llmgw.planner.schema), so the sorting pass is skipped.
    `default` is json.dumps's: data needing it is not plain, so it goes to json.dumps.
    """
    import pydantic_core

    plain = [True]
    # A plan repeats a few shapes of object thousands of times: each shape's key order is
    # worked out once. Scalars are placed without a call (most values are scalars).
    orders: dict[tuple[Any, ...], list[str] | None] = {}
    scalar = frozenset((str, int, bool, type(None)))

    def sort(value: Any) -> Any:
        kind = type(value)
        if kind is dict:
            keys = tuple(value)
            order = orders.get(keys, ())
            if order == ():
                # json.dumps turns other keys than strings into strings its own way
                order = orders[keys] = sorted(keys) if all(type(k) is str for k in keys) else None
            if order is None:
                plain[0] = False
                return value
            return {k: v if type(v) in scalar else sort(v) for k in order for v in (value[k],)}
        if kind is list or kind is tuple:
            return [v if type(v) in scalar else sort(v) for v in value]
        if kind in scalar:
            return value
        plain[0] = False  # floats, subclasses, anything json.dumps judges itself
        return value

    ordered = data if presorted else sort(data)
    if plain[0]:
        text = pydantic_core.to_json(ordered, indent=2).decode()
        if text.isascii() and "\x7f" not in text:  # json.dumps escapes DEL, Rust does not
            return text + "\n"
    return json.dumps(data, indent=2, sort_keys=True, default=default) + "\n"
