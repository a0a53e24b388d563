"""The fast plain YAML reader (libyaml events) gives ruamel's data and lines, or hands the text to ruamel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmgw import yamlio
from llmgw.yamlio import YamlSyntaxError, line_of, loads_yaml

TEXT = """\
# a catalog
models:
  - name: coder
    aliases: [c, "quoted"]
    scaling: {min: 1, max: 2, idle_timeout: 30m}
    flags: {a: true, b: False, c: ~, d: null, e: yes, f: 'on'}
    numbers: [0, -3, +4, 1.25, -0.0, 3b, v1, 1/2]
    text: |
      two
      lines
    profiles:
      - name: cpu
        engine: llamacpp

        min_memory_gb: 16
  - name: small
"""


def walk(doc: Any, pre: tuple[Any, ...] = ()) -> Any:
    yield list(pre)
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from walk(v, (*pre, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from walk(v, (*pre, i))


def typed(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: typed(v) for k, v in d.items()}
    if isinstance(d, list):
        return [typed(v) for v in d]
    return (type(d).__name__ if isinstance(d, bool | None) else
            "int" if isinstance(d, int) else "float" if isinstance(d, float) else "str", d if d is None else str(d))


def test_same_data_and_lines_as_ruamel() -> None:
    fast = yamlio._plain_fast(TEXT, Path("c.yaml"))
    assert fast is not yamlio._NOT_PLAIN
    slow = yamlio._yaml().load(TEXT)
    assert typed(fast) == typed(slow)
    for loc in walk(slow):
        assert line_of(fast, loc) == line_of(slow, loc), loc
    assert line_of(fast, ["models", 0, "profiles", 0, "min_memory_gb"]) == 15


@pytest.mark.parametrize("text", [
    "a: 1_000\n", "a: 017\n", "a: 1e3\n", "a: .inf\n", "a: 2024-01-01\n", "a: 0x1f\n", "a: 1:30\n",
    "a: &x 1\nb: *x\n", "a: !!str 1\n", "%YAML 1.1\n---\na: yes\n", "a: 1\na: 2\n", "<<: {a: 1}\n",
    "? [a]\n: 1\n", "a: 1\n---\nb: 2\n",
])
def test_what_it_leaves_to_ruamel(text: str) -> None:
    assert yamlio._plain_fast(text, Path("c.yaml")) is yamlio._NOT_PLAIN


def test_errors_still_come_from_ruamel_with_the_line() -> None:
    with pytest.raises(YamlSyntaxError) as exc:
        loads_yaml("a: 1\na: 2\n", Path("c.yaml"), plain=True)
    assert exc.value.line == 2
    with pytest.raises(YamlSyntaxError, match="nests deeper than"):
        loads_yaml("a:\n" + "".join("  " * i + f"- k{i}:\n" for i in range(1, 80)), Path("c.yaml"), plain=True)
