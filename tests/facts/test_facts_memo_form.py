"""The facts memo's compact form (records.pack_records): what it unpacks is what was packed.

The memo of a 4,096-host fleet's facts is loaded on every plan and view, so its records
are rebuilt without pydantic's validation; these tests hold them to equal, dump and
behave exactly like the records validation makes.
"""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from pathlib import Path

import pytest

import llmgw.facts as facts_pkg
from llmgw.facts import cache as facts_cache
from llmgw.facts import memo, records
from llmgw.facts.cache import read_facts, write_facts
from llmgw.facts.digest import text_digest
from llmgw.facts.records import HostFacts, pack_records, unpack_records

NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
FULL = {
    "host": "gpu-01", "gathered_at": "2026-11-30T06:00:00Z", "stale_since": "2026-11-30T07:00:00+01:00",
    "stale_reason": "unreachable", "cpus": 192, "memory_total_mb": 2097152,
    "gpus": [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA H100 80GB HBM3", "gpu_class": "H100-80GB",
              "memory_total_mb": 81559, "memory_used_mb": 12, "problems": ["hot", "ecc"][:i]} for i in range(3)],
    "gpus_unknown_reason": "partly", "filesystems": [
        {"mount": "/", "device": "/dev/nvme0n1", "fstype": "ext4", "shared": False, "free_bytes": 1,
         "total_bytes": 2, "paths": ["/var/cache/llmgw", "/models"]},
        {"mount": "/nfs", "device": "filer:/x", "fstype": "nfs4", "shared": True, "free_bytes": 3,
         "total_bytes": 4, "paths": []}],
    "weights": [{"path": "/models/a.gguf", "size_bytes": 5, "cache": True, "cache_name": "ab12"},
                {"path": "/models/b.gguf", "size_bytes": 6, "cache": False}],
    "units": [{"name": "llmgw-shard@m-0-0.service", "active_state": "active", "sub_state": "running",
               "lineage": "L1", "gpus": [0, 1], "memory_mb": 7},
              {"name": "llmgw-router.service", "active_state": "failed"}],
    "units_unknown_reason": None, "engines": {"vllm": "0.6", "llamacpp": "b4000"},
    "ib_adapters": [{"name": "mlx5_0", "node_guid": "0x0000000000000001", "node_desc": "gpu-01 mlx5_0",
                     "ports": [{"port": 1, "state": "ACTIVE", "rate": "200 Gb/sec (4X HDR)",
                                "link_layer": "InfiniBand", "port_guid": "0x0000000000000002"},
                               {"port": 2, "state": "DOWN"}]},
                    {"name": "mlx5_1", "ports": []}],
    "ibnetdiscover": "#\n# Topology file\n" * 3, "ibnetdiscover_reason": "one fabric of two",
}
VARIANTS = [
    FULL,
    {"host": "bare", "gathered_at": "2026-11-30T06:00:00Z"},  # every optional field unset: None
    {"host": "empty", "gathered_at": NOW.isoformat(), "gpus": [], "filesystems": [], "weights": [], "units": [],
     "engines": {}, "ib_adapters": [], "ibnetdiscover": ""},
    {**FULL, "host": "same-time-other-zone", "gathered_at": "2026-11-30T07:00:00+01:00"},
]


def validated() -> list[HostFacts]:
    # from JSON, as the facts cache reads them, and from Python objects (other fields-set shapes)
    return ([HostFacts.model_validate_json(HostFacts.model_validate(v).model_dump_json()) for v in VARIANTS]
            + [HostFacts.model_validate(v) for v in VARIANTS])


def round_trip(hosts: list[HostFacts]) -> list[HostFacts]:
    return unpack_records(pickle.loads(pickle.dumps(pack_records(hosts), protocol=pickle.HIGHEST_PROTOCOL)))


def _walk(a: object, b: object) -> None:
    """Same types, same fields sets, all the way down."""
    assert type(a) is type(b)
    if isinstance(a, records._Model):
        assert isinstance(b, records._Model)
        assert a.model_fields_set == b.model_fields_set
        assert list(a.__dict__) == list(b.__dict__)
        assert a.__pydantic_extra__ is None and b.__pydantic_extra__ is None
        assert a.__pydantic_private__ is None and b.__pydantic_private__ is None
        for name in type(a).model_fields:
            _walk(getattr(a, name), getattr(b, name))
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _walk(x, y)
    else:
        assert a == b
        if isinstance(a, datetime):
            assert isinstance(b, datetime) and a.utcoffset() == b.utcoffset()


def test_unpacked_records_equal_and_dump_like_validated_ones() -> None:
    hosts = validated()
    assert len({h.model_fields_set == set(HostFacts.model_fields) for h in hosts}) == 2  # both shapes
    back = round_trip(hosts)
    assert back == hosts
    for was, got in zip(hosts, back, strict=True):
        assert got.model_dump() == was.model_dump()
        assert got.model_dump(mode="json") == was.model_dump(mode="json")
        assert got.model_dump_json() == was.model_dump_json()
        assert got.model_dump_json(exclude_unset=True) == was.model_dump_json(exclude_unset=True)
        _walk(was, got)
    # equal times in other zones are equal, but are not the same time to write
    assert back[0].gathered_at == back[3].gathered_at
    assert back[3].model_dump_json().count("+01:00") == 2


def test_unpacked_records_behave_like_validated_ones() -> None:
    back = round_trip(validated())
    host = back[0]
    changed = host.model_copy(update={"stale_since": None, "units": None})
    assert changed.stale_since is None and changed.units is None and host.units is not None
    assert host.model_fields_set == set(HostFacts.model_fields)  # a copy's fields set is its own
    bare = back[len(VARIANTS) + 1]  # validated from Python: only two fields set
    assert bare.model_copy(update={"cpus": 4}).model_fields_set == {"host", "gathered_at", "cpus"}
    assert bare.model_fields_set == {"host", "gathered_at"}
    assert host.gpus is not None and [g.healthy for g in host.gpus] == [True, False, False]
    assert host.healthy_gpus() == host.gpus[:1] and host.stale and not back[1].stale
    with pytest.raises(ValueError):
        host.cpus = 3  # type: ignore[misc]  # still frozen
    assert HostFacts.model_validate(host.model_dump()) == host
    assert host.gpus[0].problems is not host.gpus[1].problems  # lists are each record's own
    assert round_trip([]) == []
    portless = [HostFacts.model_validate({**FULL, "ib_adapters": [{"name": "mlx5_0"}, {"name": "mlx5_1"}]})]
    back = round_trip(portless)  # no port in the fleet at all
    assert back == portless and back[0].ib_adapters is not None
    assert [a.ports for a in back[0].ib_adapters] == [[], []]
    assert back[0].ib_adapters[0].ports is not back[0].ib_adapters[1].ports


def test_every_record_class_inside_hostfacts_is_packed_flat() -> None:
    seen = set()

    def visit(cls: type[records._Model]) -> None:
        for child in records._CHILDREN[cls].values():
            assert records._PACKED_CLASSES.index(child) < records._PACKED_CLASSES.index(cls)  # children first
            seen.add(child)
            visit(child)

    visit(HostFacts)
    assert seen == set(records._PACKED_CLASSES) - {HostFacts}
    assert records._CHILDREN[HostFacts] == {"gpus": records.Gpu, "filesystems": records.Filesystem,
                                            "weights": records.Weights, "units": records.Unit,
                                            "ib_adapters": records.IbAdapter}


def test_read_facts_from_the_memo_equals_read_facts_from_files(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMGW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(facts_pkg, "_memo", memo)  # as the bastion's CLI does (use_memo)
    for i, variant in enumerate(VARIANTS):
        write_facts(tmp_path / "facts", HostFacts.model_validate({**variant, "host": f"h{i}"}))
    plain = read_facts(tmp_path / "facts", memo_min=10**9)
    assert read_facts(tmp_path / "facts", memo_min=0) == plain  # parsed, then memoised

    def no_parsing(*_: object) -> None:
        raise AssertionError("parsed although the memo holds these facts")

    with monkeypatch.context() as patched:
        patched.setattr(facts_cache, "_read_one", no_parsing)
        memoised = read_facts(tmp_path / "facts", memo_min=0)
    assert memoised == plain and list(memoised) == list(plain)
    assert [f.model_dump_json() for f in memoised.values()] == [f.model_dump_json() for f in plain.values()]


def test_a_memo_in_another_form_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMGW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(facts_pkg, "_memo", memo)  # as the bastion's CLI does (use_memo)
    write_facts(tmp_path / "facts", HostFacts.model_validate(FULL))
    where = (tmp_path / "facts").resolve()
    plain = read_facts(tmp_path / "facts", memo_min=10**9)
    key = (facts_cache._MEMO_FORM, *memo.code_version(facts_cache._MEMO_MODULES))
    # the form an older llmgw wrote (file name -> (fingerprint, record)), under this code's key
    memo.store("facts", where, key, {"gpu-01.json": ((1, 2, 3, 4), plain["gpu-01"])})
    assert read_facts(tmp_path / "facts", memo_min=0) == plain
    memo.store("facts", where, key, (["gpu-01.json"], [(1, 2, 3, 4)], {"Gpu": "not records"}))
    assert read_facts(tmp_path / "facts", memo_min=0) == plain
    st = (tmp_path / "facts" / "gpu-01.json").stat()
    found = [("gpu-01.json", (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))]
    memo.store("facts", where, key, (found, {"Gpu": "not records"}))
    assert read_facts(tmp_path / "facts", memo_min=0) == plain
    memo.store("facts", where, key, (found, pack_records([])))  # the files, but not their facts
    assert read_facts(tmp_path / "facts", memo_min=0) == plain
    memo.store("facts", where, key, (found, pack_records([plain["gpu-01"]])))  # no capture digests
    assert read_facts(tmp_path / "facts", memo_min=0) == plain
    memo.store("facts", where, key, (found, pack_records([plain["gpu-01"]]), {}))  # its capture's digest missing
    assert read_facts(tmp_path / "facts", memo_min=0) == plain
    capture = plain["gpu-01"].ibnetdiscover or ""
    memo.store("facts", where, key, (found, pack_records([plain["gpu-01"]]), {"gpu-01": text_digest(capture)}))
    with monkeypatch.context() as patched:  # and this one is this code's form: a hit
        patched.setattr(facts_cache, "_read_one", lambda *_: pytest.fail("parsed although memoised"))
        assert read_facts(tmp_path / "facts", memo_min=0) == plain
    # and under an older key (the code version without the form) the memo is not even unpickled
    memo.store("facts", where, tuple(memo.code_version(facts_cache._MEMO_MODULES)), "anything")
    assert read_facts(tmp_path / "facts", memo_min=0) == plain
    assert read_facts(tmp_path / "facts", memo_min=0) == plain  # rewritten, and read back


@pytest.mark.parametrize("damage", [b"", memo.MAGIC, memo.MAGIC + bytes(memo.DIGEST_BYTES), b"x" * 100])
def test_a_short_or_empty_memo_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: bytes) -> None:
    monkeypatch.setenv("LLMGW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(facts_pkg, "_memo", memo)  # as the bastion's CLI does (use_memo)
    where = tmp_path.resolve()
    memo.store("facts", where, "key", ["value"])
    assert memo.load("facts", where, "key") == ["value"]
    path = memo._path("facts", where)
    path.write_bytes(damage)
    assert memo.load("facts", where, "key") is None
    path.unlink()
    path.mkdir()  # not a file
    assert memo.load("facts", where, "key") is None
