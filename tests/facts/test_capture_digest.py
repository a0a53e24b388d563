"""Fabric captures' digests come from the facts memo, never for a text they were not made from.

A fabric map is memoised by its captures' digests; the facts memo stores each capture's
digest so a plan does not hash tens of megabytes again (llmgw.facts.digest). A digest
handed over for one text and given back for another would let a plan use the fabric map
of a fabric that changed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from llmgw import facts as facts_pkg
from llmgw.fabric.hostmap import capture_key
from llmgw.facts import digest, memo
from llmgw.facts.cache import read_facts, write_facts
from llmgw.facts.records import HostFacts


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def host(name: str, capture: str | None) -> HostFacts:
    return HostFacts.model_validate({"host": name, "gathered_at": "2026-12-02T06:00:00Z", "ibnetdiscover": capture})


def test_a_digest_is_given_back_only_for_the_object_it_was_handed_over_with() -> None:
    text = "".join(["#\n# Topology file\n", "vendid=0x2c9\n"])  # built at run time: not an interned constant
    twin = "".join(["#\n# Topology file\n", "vendid=0x2c9\n"])
    assert twin == text and twin is not text
    digest.remember([(text, "handed-over")])
    assert digest.text_digest(text) == "handed-over"
    assert digest.text_digest(twin) == sha(twin)  # equal text, another object: hashed
    digest.remember([])  # a later hand-over replaces the last
    assert digest.text_digest(text) == sha(text)


def test_a_plan_from_the_memo_does_not_hash_the_captures_again(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMGW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(facts_pkg, "_memo", memo)  # as the bastion's CLI does (use_memo)
    captures = {"gpu-01": "#\n# Topology file: fabric A\n" * 50, "gpu-02": None, "gpu-03": "# fabric B\n" * 40}
    for name, capture in captures.items():
        write_facts(tmp_path / "facts", host(name, capture))
    digests = [sha(c) for c in captures.values() if c is not None]
    cold = read_facts(tmp_path / "facts", memo_min=0)  # parses, hashes, stores the memo
    with monkeypatch.context() as patched:  # and hands over what it hashed for the memo
        patched.setattr(digest.hashlib, "sha256", lambda *_: pytest.fail("a capture was hashed twice"))
        expected = capture_key(cold.values())
    assert [d for _, _, d in expected] == digests
    digest.remember([])
    warm = read_facts(tmp_path / "facts", memo_min=0)
    with monkeypatch.context() as patched:
        patched.setattr(digest.hashlib, "sha256", lambda *_: pytest.fail("a memoised capture was hashed again"))
        assert capture_key(warm.values()) == expected
    # a capture changed after the read (another object) is hashed, not given the memo's digest
    changed = {**warm, "gpu-01": warm["gpu-01"].model_copy(update={"ibnetdiscover": "# fabric A, recabled\n"})}
    recabled = [sha("# fabric A, recabled\n"), sha(captures["gpu-03"] or "")]
    assert [d for _, _, d in capture_key(changed.values())] == recabled


def test_a_changed_facts_file_gets_the_digest_of_its_new_capture(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMGW_CACHE", str(tmp_path / "cache"))
    write_facts(tmp_path / "facts", host("gpu-01", "# before\n"))
    write_facts(tmp_path / "facts", host("gpu-02", "# other\n"))
    read_facts(tmp_path / "facts", memo_min=0)
    write_facts(tmp_path / "facts", host("gpu-01", "# after, longer\n"))  # a new fingerprint: parsed again
    partly = read_facts(tmp_path / "facts", memo_min=0)
    assert [d for _, _, d in capture_key(partly.values())] == [sha("# after, longer\n"), sha("# other\n")]
    again = read_facts(tmp_path / "facts", memo_min=0)  # the memo the partial read rewrote
    assert [d for _, _, d in capture_key(again.values())] == [sha("# after, longer\n"), sha("# other\n")]
