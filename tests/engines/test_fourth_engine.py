"""Adding an engine is one module: a fourth engine's descriptor (tests/engines/fourth_engine.py),
registered here and nowhere else, is validated by the catalog, rendered into a shard unit by
the role's template (the same Ansible render as tests/apply/test_shard_units.py, checked by
`systemd-analyze verify`) and routed by a real router over TCP, with no other file changed.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmgw.catalog import load_catalog
from llmgw.engines import names, register, unregister
from llmgw.errors import CatalogError
from llmgw.router import RouterServer
from llmgw.state import Replica, Shard
from llmgw.store import open_store
from tests.apply.test_shard_units import HERE as APPLY_TESTS
from tests.apply.test_shard_units import MGMT, ROLE, env_of, exec_start, verify
from tests.engines.fourth_engine import ENGINE, NAME, SITECUSTOMIZE
from tests.support.ansible import REPO, ansible_env, playbook
from tests.support.engine_double import EngineDouble
from tests.support.router import FAST, StateFile, model, serve_in_thread


@pytest.fixture
def fourth() -> Iterator[None]:
    register(ENGINE)
    yield
    unregister(NAME)


def catalog(tmp_path: Path, profile: str) -> Path:
    folder = tmp_path / "catalog"
    folder.mkdir(exist_ok=True)
    (folder / "tiny.yaml").write_text(textwrap.dedent(f"""\
        models:
          - name: tiny
            source: hf://org/tiny-GGUF/tiny-q4_k_m.gguf
            profiles:
              - {profile}
        """))
    return folder


def problems(folder: Path) -> str:
    with pytest.raises(CatalogError) as caught:
        load_catalog(folder)
    return str(caught.value) + "\n" + "\n".join(str(p) for p in caught.value.problems)


def test_the_catalog_takes_the_engine_once_registered_and_applies_its_descriptor(
        fourth: None, tmp_path: Path) -> None:
    good = load_catalog(catalog(tmp_path, "{name: cpu, engine: tinyserve, args: [--threads, '4']}"))
    assert [p.engine for m in good for p in m.profiles] == [NAME]
    # its owned flags, its one-node-only, its no-remote-code: each from the descriptor
    said = problems(catalog(tmp_path, "{name: cpu, engine: tinyserve, args: [--listen, '0.0.0.0:1']}"))
    assert "'--listen' is refused in args: llmgw sets the engine's listen address itself" in said, said
    said = problems(catalog(tmp_path, "{name: cpu, engine: tinyserve, nodes: 2}"))
    assert "TinyServe serves a model from one node only; set nodes: 1" in said, said
    said = problems(catalog(tmp_path, "{name: cpu, engine: tinyserve, trust_remote_code: true}"))
    assert "TinyServe runs no code from the model (GGUF weights only); remove it" in said, said


def test_an_engine_not_registered_is_refused_naming_those_that_are(tmp_path: Path) -> None:
    assert NAME not in names()
    said = problems(catalog(tmp_path, "{name: cpu, engine: tinyserve}"))
    assert "'tinyserve' is not allowed: input should be 'vllm', 'sglang' or 'llamacpp'" in said, said


def test_apply_renders_its_shard_unit_from_its_command_builder(tmp_path: Path) -> None:
    # Ansible runs in a child process: it learns the engine the way any module of
    # llmgw/engines would be known there, by being imported at start (sitecustomize here).
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    shard = {"unit": "llmgw-tiny-1-0", "replica": "tiny-1", "model": "tiny", "engine": NAME,
             "model_path": "/var/cache/llmgw/abc-tiny.gguf", "port": 20040, "args": ["--threads", "4"]}
    out = tmp_path / "units"
    out.mkdir()
    pythonpath = os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])
    playbook(APPLY_TESTS / "render_units.yml",
             {"shards": [shard], "out_dir": str(out), "llmgw_mgmt_address": MGMT, "llmgw_engine_api_keys": {}},
             env=ansible_env(ANSIBLE_FILTER_PLUGINS=str(ROLE / "filter_plugins"), PYTHONPATH=pythonpath))
    unit = (out / "llmgw-tiny-1-0.service").read_text()
    assert exec_start(unit) == ["/opt/llmgw/engines/tinyserve/tinyserve", "serve", "/var/cache/llmgw/abc-tiny.gguf",
                                "--name", "tiny", "--listen", f"{MGMT}:20040", "--threads", "4"]
    assert env_of(unit)["LLMGW_MODEL"] == "tiny" and "PYTHONUNBUFFERED" not in env_of(unit)  # not a Python engine
    assert "MemoryDenyWriteExecute=yes" in unit  # the strict sandbox of a native engine
    verify(out, "llmgw-tiny-1-0")


def test_the_router_routes_what_its_descriptor_serves_and_nothing_else(fourth: None, tmp_path: Path) -> None:
    double = EngineDouble("t", ("tiny",)).start()
    store = open_store(f"sqlite://{tmp_path / 'store.sqlite'}")
    state = StateFile(tmp_path / "state.json")
    state.write([model("tiny")], [Replica(
        id="tiny-1", model="tiny", profile="cpu", engine=NAME, state="ready", endpoint=double.endpoint,
        shards=[Shard(node="localhost", rank=0, port=double.port, unit="llmgw-tiny-1-0.service")])])
    server = RouterServer(state_path=state.path, store=store, listen=("127.0.0.1", 0),
                          admin_listen=("127.0.0.1", 0), settings=FAST, graceful_timeout=5)
    thread, _ = serve_in_thread(server)
    try:
        key = store.create_key("tester")[1]
        base = f"http://127.0.0.1:{server.addresses['client'][1]}"
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
            rerank = http.post("/v1/rerank", json={"model": "tiny", "query": "q", "documents": ["a", "b"]})
            assert rerank.status_code == 200 and rerank.json()["served_by"] == "t", rerank.text
            tokens = http.post("/v1/tokenize", json={"model": "tiny", "prompt": "hi"})
            assert tokens.status_code == 200 and tokens.json()["tokens"] == [104, 105], tokens.text
            # The double serves /v1/score too; the descriptor does not say so: never forwarded.
            score = http.post("/v1/score", json={"model": "tiny", "text_1": "a", "text_2": "b"})
            assert score.status_code == 404, score.text
            assert "tinyserve serves: POST /v1/chat/completions, POST /v1/rerank, POST /v1/tokenize" \
                in score.json()["error"]["message"], score.text
            listed = http.get("/v1/models").json()["data"]
            assert [m["id"] for m in listed] == ["tiny"], listed
        assert [(s.method, s.path, s.model) for s in double.seen] == [
            ("POST", "/v1/rerank", "tiny"), ("POST", "/tokenize", "tiny")]
    finally:
        server.stop()
        thread.join(30)
        double.stop()
        store.close()
