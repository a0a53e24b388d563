"""`json_text` writes what `json.dumps(indent=2, sort_keys=True)` writes, byte for byte (plans,
facts): the fast path must never change a plan's bytes, whatever the data holds."""

from __future__ import annotations

import json
import random
import string
from typing import Any

from llmgw.yamlio import json_text

CHARS = string.printable + "\x00\x1f\x7f\u00e9\u2028\U0001f600"


def _value(rnd: random.Random, depth: int = 0) -> Any:
    kind = rnd.randrange(9 if depth < 4 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rnd.random() < 0.5
    if kind == 2:
        return rnd.randrange(-(10**20), 10**20)
    if kind == 3:
        return "".join(rnd.choice(CHARS) for _ in range(rnd.randrange(6)))
    if kind == 4:
        return rnd.choice([0.5, 1e16, 1e-7, 3.0, -0.0])
    if kind in (5, 6):
        return [_value(rnd, depth + 1) for _ in range(rnd.randrange(4))]
    keys = string.ascii_letters + '"\\/\u00e9'
    return {"".join(rnd.choice(keys) for _ in range(rnd.randrange(1, 4))): _value(rnd, depth + 1)
            for _ in range(rnd.randrange(4))}


def test_json_text_matches_json_dumps_on_random_data() -> None:
    rnd = random.Random(17)
    for _ in range(1500):
        value = _value(rnd)
        assert json_text(value) == json.dumps(value, indent=2, sort_keys=True) + "\n", value


def test_json_text_plain_and_fallback_cases() -> None:
    plain = {"b": [1, {"z": None, "a": True}], "a": "x\ny\t\"q\"", "c": {}, "d": []}
    assert json_text(plain) == json.dumps(plain, indent=2, sort_keys=True) + "\n"
    for odd in ({"a": 1.5}, {"k": "caf\u00e9"}, {"k": "\x7f"}, {1: "int key"}, ("t", [1])):
        assert json_text(odd) == json.dumps(odd, indent=2, sort_keys=True) + "\n"
