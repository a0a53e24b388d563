"""The facts cache: one JSON per host, atomic, byte-stable, and loud about a bad file."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from llmgw.errors import FactsError
from llmgw.facts.cache import facts_path, read_facts, write_facts
from llmgw.facts.records import Gpu, HostFacts

NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def facts(host: str, **kw: object) -> HostFacts:
    return HostFacts.model_validate({"host": host, "gathered_at": NOW, **kw})


def test_round_trip_one_file_per_host(tmp_path: Path) -> None:
    a = facts("gpu-01", memory_total_mb=1024, gpus=[Gpu(index=0, uuid="GPU-1", name="NVIDIA L40S",
                                                        gpu_class="L40S-48GB", problems=["hot"])])
    b = facts("cpu-01", gpus=None, gpus_unknown_reason="no NVIDIA driver")
    write_facts(tmp_path / "facts", a)
    write_facts(tmp_path / "facts", b)
    assert sorted(p.name for p in (tmp_path / "facts").iterdir()) == ["cpu-01.json", "gpu-01.json"]
    assert read_facts(tmp_path / "facts") == {"cpu-01": b, "gpu-01": a}


def test_same_facts_same_bytes(tmp_path: Path) -> None:
    write_facts(tmp_path, facts("h", cpus=4, engines={"vllm": "0.6", "llamacpp": "1"}))
    first = (tmp_path / "h.json").read_bytes()
    write_facts(tmp_path, facts("h", engines={"llamacpp": "1", "vllm": "0.6"}, cpus=4))
    assert (tmp_path / "h.json").read_bytes() == first
    assert first.index(b'"cpus"') < first.index(b'"engines"')  # sorted keys


def test_missing_dir_is_no_facts(tmp_path: Path) -> None:
    assert read_facts(tmp_path / "absent") == {}


def test_unknown_stays_unknown(tmp_path: Path) -> None:
    write_facts(tmp_path, facts("old-01"))
    got = read_facts(tmp_path)["old-01"]
    assert got.gpus is None and got.memory_total_mb is None and got.filesystems is None


def test_a_bad_file_names_itself(tmp_path: Path) -> None:
    write_facts(tmp_path, facts("good"))
    (tmp_path / "bad.json").write_text('{"host": "bad", "gathered_at": "2026-01-01T00:00:00Z", "cpus": "many"}')
    with pytest.raises(FactsError) as err:
        read_facts(tmp_path)
    assert str(tmp_path / "bad.json") in err.value.message and "cpus" in err.value.message
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(FactsError, match=r"bad\.json"):
        read_facts(tmp_path)


def test_a_file_holding_another_hosts_facts_is_refused(tmp_path: Path) -> None:
    (tmp_path / "gpu-02.json").write_text(facts("gpu-01").model_dump_json())
    with pytest.raises(FactsError, match="holds facts of host 'gpu-01', not 'gpu-02'"):
        read_facts(tmp_path)


def test_temp_files_and_subfolders_are_ignored(tmp_path: Path) -> None:
    write_facts(tmp_path, facts("h"))
    (tmp_path / ".h.json.abc.tmp").write_text("half")
    (tmp_path / "sources").mkdir()
    (tmp_path / "sources" / "x.json").write_text("{}")
    assert list(read_facts(tmp_path)) == ["h"]


@pytest.mark.parametrize("bad", ["", "../etc", "a/b", ".hidden"])
def test_host_names_that_cannot_name_a_file(tmp_path: Path, bad: str) -> None:
    with pytest.raises(FactsError):
        facts_path(tmp_path, bad)
