"""The key store on SQLite and on the real PostgreSQL: keys, the group tree, usage counters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.errors import StoreError
from llmgw.store import MinuteCount, Store, UsageDelta, open_store
from llmgw.store.keys import hash_key


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path}/store.sqlite" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = open_store(url)
    yield s
    s.close()


def test_key_is_returned_once_and_stored_hashed(store: Store) -> None:
    record, secret = store.create_key("alice")
    assert secret.startswith("sk-llmgw-") and len(secret) > 40
    assert record.hash == hash_key(secret) and secret not in repr(store.list_keys())
    assert secret.startswith(record.prefix) and len(record.prefix) < len(secret) // 2
    assert [k.name for k in store.list_keys()] == ["alice"]


def test_names_unique_among_active_keys_and_reusable_after_revoke(store: Store) -> None:
    store.create_key("alice")
    with pytest.raises(StoreError, match="active key named 'alice'"):
        store.create_key("alice")
    revoked = store.revoke_key("alice")
    assert revoked.revoked_at is not None
    store.create_key("alice")
    assert len(store.list_keys()) == 1 and len(store.list_keys(include_revoked=True)) == 2
    with pytest.raises(StoreError, match="no active key"):
        store.revoke_key("nobody")


def test_revoke_by_id(store: Store) -> None:
    record, _ = store.create_key("bob")
    assert store.revoke_key(record.id).name == "bob"
    assert store.list_keys() == []


def test_group_tree_and_limits(store: Store) -> None:
    store.set_group("org", tokens_per_day=1000)
    store.set_group("team", parent="org", rpm=10)
    g = store.set_group("team", tokens_per_day=50)  # other fields stay
    assert (g.parent, g.rpm, g.tokens_per_day) == ("org", 10, 50)
    g = store.set_group("team", rpm=None)
    assert g.rpm is None
    with pytest.raises(StoreError, match="loop"):
        store.set_group("org", parent="team")
    with pytest.raises(StoreError, match="no group 'nope'"):
        store.set_group("x", parent="nope")
    with pytest.raises(StoreError, match="no group 'ghost'"):
        store.create_key("k", group="ghost")
    store.create_key("k", group="team")
    with pytest.raises(StoreError, match="still used by group team"):
        store.delete_group("org")
    with pytest.raises(StoreError, match="key k"):
        store.delete_group("team")
    store.revoke_key("k")
    store.delete_group("team")
    assert [g.name for g in store.list_groups()] == ["org"]


def test_usage_batches_add_up(store: Store) -> None:
    k, _ = store.create_key("alice")
    store.add_usage([UsageDelta(k.id, "2026-01-01", "m", 2, 10, 20)], [MinuteCount(k.id, 100, 2)])
    store.add_usage([UsageDelta(k.id, "2026-01-01", "m", 1, 1, 2), UsageDelta(k.id, "2026-01-02", "m", 1, 1, 1)],
                    [MinuteCount(k.id, 100, 1), MinuteCount(k.id, 101, 1)])
    rows = store.usage("2026-01-01")
    assert [(r.requests, r.prompt_tokens, r.completion_tokens, r.total_tokens) for r in rows] == [(3, 11, 22, 33)]
    assert len(store.usage()) == 2
    assert {(m.minute, m.requests) for m in store.minute_requests(100)} == {(100, 3), (101, 1)}
    store.add_usage([], [MinuteCount(k.id, 200, 1)])  # old minutes are pruned
    assert {m.minute for m in store.minute_requests(0)} == {200}


def test_two_handles_share_one_store(store: Store) -> None:
    other = open_store(store.url)
    try:
        _, secret = store.create_key("shared")
        assert [k.hash for k in other.list_keys()] == [hash_key(secret)]
    finally:
        other.close()


def test_bad_urls_say_what_to_write(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="unknown store URL"):
        open_store("mysql://x")
    with pytest.raises(StoreError, match="names no file"):
        open_store("sqlite://")


@pytest.mark.postgres
def test_unreachable_postgres_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="cannot connect") as info:
        open_store("postgresql://llmgw:secret@127.0.0.1:1/none")
    assert "secret" not in info.value.message  # the password never shows in messages
