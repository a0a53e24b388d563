"""Engines answer only through the router: a real llama-server that requires its replica's
key (given through its environment, as the engine unit's EnvironmentFile does), and the
real router that shows it that key from the 0600 file apply delivers beside the state.
"""

from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from llmgw.router.engine_keys import ENGINE_KEYS_FILE
from llmgw.store import Store
from tests.support.ansible import run_playbook
from tests.support.router import (
    HTTP,
    RunningRouter,
    StateFile,
    model,
    replica,
    start_engine,
    wait_until,
)

pytestmark = pytest.mark.engine

KEY = "llmgw-engine-" + "k" * 40
BODY = {"model": "tiny", "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2}


@pytest.fixture
def keyed_engine(tmp_path: Path) -> Iterator[str]:
    """llama-server requiring KEY, read from LLAMA_API_KEY (never its command line)."""
    eng = start_engine(tmp_path, "tiny", parallel=2, ctx=2048, env={"LLAMA_API_KEY": KEY}, timeout=60)
    try:
        assert KEY not in Path(f"/proc/{eng.proc.pid}/cmdline").read_text()
        yield eng.endpoint
    finally:
        eng.kill()


def write_keys(state: StateFile, keys: dict[str, str], mode: int = 0o600) -> Path:
    path = state.path.with_name(ENGINE_KEYS_FILE)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(keys))
    tmp.chmod(mode)
    tmp.replace(path)
    return path


def ask(router: RunningRouter, key: str) -> httpx.Response:
    return HTTP.post(router.base_url + "/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {key}"},
                     timeout=60)


def test_the_engine_refuses_anyone_but_the_router(keyed_engine: str, state: StateFile, sqlite_store: Store,
                                                  start_router: Callable[..., RunningRouter]) -> None:
    direct = HTTP.post(keyed_engine + "/v1/chat/completions", json=BODY, timeout=60)
    assert direct.status_code == 401  # the network skipping the router gets nothing
    write_keys(state, {"tiny-0": KEY})
    state.write([model("tiny")], [replica("tiny-0", "tiny", keyed_engine)])
    router = start_router(state.path)
    _, client_key = sqlite_store.create_key("client")
    r = ask(router, client_key)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 2


def test_one_replicas_key_never_reaches_another(keyed_engine: str, state: StateFile, sqlite_store: Store,
                                                start_router: Callable[..., RunningRouter]) -> None:
    # Two replicas on the same engine; the key file names only the first. Whatever the
    # router sent the first must not travel with requests to the second.
    state.write([model("tiny"), model("other")],
                [replica("tiny-0", "tiny", keyed_engine), replica("other-0", "other", keyed_engine)])
    write_keys(state, {"tiny-0": KEY})
    router = start_router(state.path)
    _, client_key = sqlite_store.create_key("client")
    assert ask(router, client_key).status_code == 200
    other = HTTP.post(router.base_url + "/v1/chat/completions", json={**BODY, "model": "other"},
                      headers={"Authorization": f"Bearer {client_key}"}, timeout=60)
    assert other.status_code == 401


def test_a_key_file_others_can_read_is_refused(keyed_engine: str, state: StateFile, sqlite_store: Store,
                                               start_router: Callable[..., RunningRouter]) -> None:
    state.write([model("tiny")], [replica("tiny-0", "tiny", keyed_engine)])
    write_keys(state, {"tiny-0": KEY}, mode=0o644)
    router = start_router(state.path)
    assert router.server.router is not None
    keys = router.server.router.engine_keys
    assert keys.keys == {} and keys.error is not None and "0600" in keys.error
    assert KEY not in keys.error
    _, client_key = sqlite_store.create_key("client")
    assert ask(router, client_key).status_code == 401  # the engine's refusal, passed on
    write_keys(state, {"tiny-0": KEY})  # fixed: picked up without a restart
    wait_until(lambda: keys.keys == {"tiny-0": KEY}, 10, "the router to read the fixed key file")
    assert ask(router, client_key).status_code == 200


# -- how the keys get there --------------------------------------------------------------------
def test_engine_keys_are_derived_per_replica_from_a_0600_secret(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from llmgw.apply.engine_keys import SECRET_ENV, EngineKeyring

    monkeypatch.delenv(SECRET_ENV, raising=False)
    ring = EngineKeyring.beside(tmp_path / "state.json")
    a, b = ring.key("tiny-0"), ring.key("tiny-1")
    assert a != b and len(a) > 40
    assert stat.S_IMODE(ring.secret_path.stat().st_mode) == 0o600
    assert EngineKeyring.beside(tmp_path / "state.json").key("tiny-0") == a  # stable across applies
    monkeypatch.setenv(SECRET_ENV, "ab" * 32)  # several control hosts: one secret for all
    assert EngineKeyring.beside(tmp_path / "other.json").key("tiny-0") == EngineKeyring(tmp_path / "x").key("tiny-0")


@pytest.mark.root
def test_the_engine_role_writes_keys_root_only_and_never_shows_them(tmp_path: Path) -> None:
    keys_dir = tmp_path / "engine-keys"
    shards = [{"unit": "llmgw-tiny-0-0", "replica": "tiny-0", "engine": "llamacpp", "port": 20000},
              {"unit": "llmgw-big-1-0", "replica": "big-1", "engine": "vllm", "port": 20001},
              {"unit": "llmgw-sg-1-0", "replica": "sg-1", "engine": "sglang", "port": 20002},
              {"unit": "llmgw-old-1-0", "state": "absent"}]
    (keys_dir).mkdir(mode=0o700)
    (keys_dir / "llmgw-old-1-0.env").write_text("LLAMA_API_KEY=stale\n")
    (keys_dir / "llmgw-old-1-0.yaml").write_text('{"api_key": "stale"}\n')
    extra = {"llmgw_engine_keys_dir": str(keys_dir), "shards": shards,
             "llmgw_engine_api_keys": {"llmgw-tiny-0-0": KEY, "llmgw-big-1-0": KEY.replace("k", "v"),
                                       "llmgw-sg-1-0": KEY.replace("k", "s")}}
    done = run_playbook(Path(__file__).with_name("engine_keys.yml"), extra, verbose=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    shown = output.split("PLAY [", 1)[-1]  # what the tasks showed (-vvv echoes the command line before it)
    assert "k" * 40 not in shown and "v" * 40 not in shown and "s" * 40 not in shown
    llama, vllm = keys_dir / "llmgw-tiny-0-0.env", keys_dir / "llmgw-big-1-0.env"
    assert llama.read_text() == f"LLAMA_API_KEY={KEY}\n"
    assert vllm.read_text() == f"VLLM_API_KEY={KEY.replace('k', 'v')}\n"
    for f in (llama, vllm):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600 and f.stat().st_uid == 0
    assert not (keys_dir / "llmgw-old-1-0.env").exists() and not (keys_dir / "llmgw-old-1-0.yaml").exists()
    # SGLang reads its key from a file of options (--config): root-only, handed to its unit alone
    # as a credential (LoadCredential=), so no other engine's user can read it.
    sglang = keys_dir / "llmgw-sg-1-0.yaml"
    assert json.loads(sglang.read_text()) == {"api-key": KEY.replace("k", "s")}
    assert stat.S_IMODE(sglang.stat().st_mode) == 0o600 and (sglang.stat().st_uid, sglang.stat().st_gid) == (0, 0)
    assert not (keys_dir / "llmgw-sg-1-0.env").exists()
    assert stat.S_IMODE(keys_dir.stat().st_mode) == 0o700 and keys_dir.stat().st_gid == 0


def test_the_optional_firewall_admits_only_the_given_sources(tmp_path: Path) -> None:
    if shutil.which("nft") is None:
        pytest.fail("nft is missing on this machine (Debian package nftables; scripts/setup-host installs it)")
    out = tmp_path / "llmgw-engines.nft"
    extra = {"out_file": str(out), "llmgw_engine_firewall_sources": ["10.0.0.5", "10.0.1.0/24", "fd00::7"],
             "shards": [{"unit": "llmgw-tiny-0-0", "port": 20000}, {"unit": "llmgw-big-1-1", "port": 20004}]}
    done = run_playbook(Path(__file__).with_name("engine_firewall.yml"), extra)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]  # includes `nft -c -f` accepting it
    rules = [ln.strip() for ln in out.read_text().splitlines()]
    ports = "tcp dport { 20000, 20004, 30000, 30004 }"
    assert f"{ports} ip saddr {{ 10.0.0.5, 10.0.1.0/24 }} accept" in rules
    assert f"{ports} ip6 saddr {{ fd00::7 }} accept" in rules
    assert rules.index(f"{ports} drop") > rules.index(f"{ports} ip saddr {{ 10.0.0.5, 10.0.1.0/24 }} accept")
