"""LoRA adapters through the router (docs/adapters.md): the routing table gives each adapter
only the replicas of its base that loaded it, and each engine is asked as it needs
(llama.cpp: the base's name and `lora` ids; vLLM/SGLang: the adapter's own name)."""

from __future__ import annotations

import json

from llmgw.router.adapters import engine_ask
from llmgw.router.proxy import upstream_body
from llmgw.router.table import RoutingTable
from llmgw.state import AdapterRecord, LoadedAdapter, Replica, Shard, State
from tests.support.router import model


def _replica(rid: str, engine: str, adapters: list[str], port: int) -> Replica:
    return Replica(id=rid, model="tiny", profile="p", engine=engine, state="ready",  # type: ignore[arg-type]
                   endpoint=f"http://127.0.0.1:{port}", adapters=[LoadedAdapter(name=a) for a in adapters],
                   shards=[Shard(node="localhost", rank=0, port=port, unit=f"llmgw-{rid}-0.service")])


def _table() -> RoutingTable:
    base = model("tiny").model_copy(update={"adapters": [
        AdapterRecord(name="tiny-sql", aliases=["sql"]), AdapterRecord(name="tiny-poet", scale_percent=50)]})
    return RoutingTable(State(lineage="l", models=[base], replicas=[
        _replica("tiny-1", "llamacpp", ["tiny-sql", "tiny-poet"], 20001),
        _replica("tiny-2", "llamacpp", [], 20002),  # started before the adapters were added
        _replica("tiny-3", "vllm", ["tiny-poet"], 20003),
    ]))


def test_an_adapter_is_served_only_by_replicas_that_loaded_it() -> None:
    table = _table()
    sql, poet = table.resolve("sql"), table.resolve("tiny-poet")
    assert sql is not None and poet is not None
    assert (sql.name, sql.base, [r.id for r in sql.replicas]) == ("tiny-sql", "tiny", ["tiny-1"])
    assert [r.id for r in poet.replicas] == ["tiny-1", "tiny-3"]
    assert sql.replicas[0] is table.replicas["tiny-1"]  # one runtime: in-flight counts are shared
    assert not sql.on_demand and table.chain(sql) == [sql]
    assert sorted(table.adapters) == ["tiny-poet", "tiny-sql"] and "tiny-sql" not in table.models
    for _ in range(10):
        picked = sql.pick(set(), 0.0)
        assert picked is not None and picked.id == "tiny-1"


def test_a_model_name_wins_over_an_adapter_of_the_same_name() -> None:
    base = model("tiny").model_copy(update={"adapters": [AdapterRecord(name="other")]})
    table = RoutingTable(State(lineage="l", models=[base, model("other")], replicas=[]))
    entry = table.resolve("other")
    assert entry is not None and entry.base is None and table.adapters == {}


def test_llamacpp_is_asked_for_the_base_with_the_adapter_selected_by_id() -> None:
    table = _table()
    poet, sql, base = table.resolve("tiny-poet"), table.resolve("tiny-sql"), table.resolve("tiny")
    assert poet is not None and sql is not None and base is not None
    lora = table.replicas["tiny-1"]
    assert engine_ask(sql, lora).model == "tiny"
    assert engine_ask(sql, lora).lora_json() == [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.0}]
    assert engine_ask(poet, lora).lora_json() == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.5}]
    # The base: every loaded adapter at 0 (llama-server applies loaded ones otherwise).
    assert engine_ask(base, lora).lora_json() == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}]
    assert engine_ask(base, table.replicas["tiny-2"]).lora_json() == []


def test_vllm_is_asked_for_the_adapter_by_its_own_name() -> None:
    table = _table()
    poet = table.resolve("tiny-poet")
    assert poet is not None
    ask = engine_ask(poet, table.replicas["tiny-3"])
    assert (ask.model, ask.lora) == ("tiny-poet", None)


def test_the_body_carries_the_selection_and_never_the_clients_own_lora() -> None:
    req = {"model": "sql", "messages": [], "lora": [{"id": 5, "scale": 9}]}
    raw = json.dumps(req).encode()
    sent = json.loads(upstream_body(req, raw, "tiny", False, None, [{"id": 0, "scale": 1.0}]))
    assert sent["model"] == "tiny" and sent["lora"] == [{"id": 0, "scale": 1.0}]
    assert "lora" not in json.loads(upstream_body(req, raw, "sql", False, None, []))
    plain = {"model": "tiny", "messages": []}
    raw_plain = json.dumps(plain).encode()
    assert upstream_body(plain, raw_plain, "tiny", False, None, []) is raw_plain  # nothing to change: as sent
