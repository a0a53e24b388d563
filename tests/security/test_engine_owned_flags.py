"""Catalog args and env cannot re-set what llmgw owns (issue #32, first finding).

Engine command lines put the catalog's args after llmgw's own and engines keep the last
occurrence, so `args: ["--trust-remote-code", "--host", "0.0.0.0", "--api-key", "k"]` made
an engine listen everywhere with a key its author knows and run the repository's code;
`env: {LD_PRELOAD: ...}` loaded any library. Each spelling below is one the engine's own
parser reads as the owned option (tests/engines/test_owned_flags.py proves that with the
pinned parsers); each is refused by the real `llmgw catalog validate` at its file:line, and
again by the real engine role's preflight (ansible-runner, as a host would run it), which
now also checks every string of the shard entry, not only args and env.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from llmgw.engines import Layout, Shard, command
from llmgw.planner import Plan
from llmgw.runner import run_playbook
from llmgw.state import State
from tests.security.test_catalog_hostile import llmgw, make_site, refused
from tests.support.cli import run_cli

HERE = Path(__file__).resolve().parent


def catalog(engine: str, key: str, value: str, source: str = "hf://org/repo/m.gguf") -> str:
    return f"""
    models:
      - name: m
        source: {json.dumps(source)}
        profiles:
          - name: p
            engine: {engine}
            {key}: {value}
    """


# engine, args, the index of the refused word
ARGS = {
    "vllm: the issue's own args": ("vllm", ["--max-model-len", "4096", "--host", "0.0.0.0"], 2),
    "vllm --api-key": ("vllm", ["--api-key", "known-to-author"], 0),
    "vllm --trust-remote-code": ("vllm", ["--trust-remote-code"], 0),
    "vllm --host=": ("vllm", ["--host=0.0.0.0"], 0),
    "vllm underscores": ("vllm", ["--api_key", "k"], 0),
    "vllm a prefix": ("vllm", ["--trust-rem"], 0),
    "vllm a short alias": ("vllm", ["-tp", "8"], 0),
    "vllm a short alias with =": ("vllm", ["-pp=2"], 0),
    "vllm a negation": ("vllm", ["--no-trust-remote-code"], 0),
    "vllm a file of options": ("vllm", ["--config", "/tmp/x.yaml"], 0),
    "vllm local media": ("vllm", ["--allowed-local-media-path", "/"], 0),
    "vllm code by name": ("vllm", ["--middleware", "os.system"], 0),
    "vllm end of options": ("vllm", ["--", "/etc"], 0),
    "sglang --tp": ("sglang", ["--tp", "16"], 0),
    "sglang a prefix of --dist-init-addr": ("sglang", ["--dist-init", "10.0.0.9:1"], 0),
    "sglang --trust-remote-code": ("sglang", ["--trust-remote-code"], 0),
    "sglang --api-key=": ("sglang", ["--api-key=k"], 0),
    "llamacpp -m": ("llamacpp", ["-m", "/etc/shadow"], 0),
    "llamacpp -a": ("llamacpp", ["--ctx-size", "2048", "-a", "other-model"], 2),
    "llamacpp --host": ("llamacpp", ["--host", "0.0.0.0"], 0),
    "llamacpp --api-key-file": ("llamacpp", ["--api-key-file", "/tmp/k"], 0),
    "llamacpp --path serves files": ("llamacpp", ["--path", "/"], 0),
    "llamacpp -ngl": ("llamacpp", ["-ngl", "1"], 0),
}


@pytest.mark.parametrize("case", list(ARGS))
def test_catalog_validate_refuses_owned_and_trust_widening_args(tmp_path: Path, case: str) -> None:
    engine, args, index = ARGS[case]
    root = make_site(tmp_path, catalog(engine, "args", json.dumps(args)))
    err = refused(llmgw(root, "catalog", "validate", "--offline"),
                  rf"models\.yaml:7: models\[0\]\.profiles\[0\]\.args\[{index}\]: ")
    assert "is refused in args" in err and args[index] in err, err


ENV = ["LD_PRELOAD", "PYTHONPATH", "PATH", "HOME", "HTTPS_PROXY", "HF_TOKEN", "HF_ENDPOINT", "OPENSSL_CONF",
       "CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME", "VLLM_API_KEY", "LLAMA_API_KEY", "LLAMA_ARG_HOST",
       "NCCL_NET_PLUGIN", "VLLM_PLUGINS", "VLLM_CACHE_ROOT", "SGLANG_LOGGING_CONFIG_PATH", "CUDA_HOME"]


@pytest.mark.parametrize("name", ENV)
def test_catalog_validate_refuses_loader_hooks_owned_names_and_secrets_in_env(tmp_path: Path, name: str) -> None:
    root = make_site(tmp_path, catalog("vllm", "env", json.dumps({name: "/tmp/x"})))
    err = refused(llmgw(root, "catalog", "validate", "--offline"), r"models\.yaml:7: models\[0\]\.profiles\[0\]\.env")
    assert f"the key {name!r} is not allowed here" in err, err


@pytest.mark.parametrize("source", ["file:///srv/models/../../etc/shadow", "file:///srv/models/%2e%2e/x",
                                    "file:///srv/./models/x"])
def test_catalog_validate_refuses_dot_dot_in_a_file_source(tmp_path: Path, source: str) -> None:
    root = make_site(tmp_path, catalog("llamacpp", "gpus", "0", source=source))
    refused(llmgw(root, "catalog", "validate", "--offline"), r"models\.yaml:3: models\[0\]\.source: .*'\.\.' parts")


def _shard(**kw: object) -> dict[str, object]:
    return {"unit": "llmgw-x-1-0", "replica": "x-1", "model": "x", "engine": "vllm",
            "model_path": "/srv/models/x", "port": 20000, "gpus": [0], **kw}


PREFLIGHT = {
    "args --host": ({"args": ["--max-model-len", "8", "--host", "0.0.0.0"]}, "args[2]: '--host' is refused"),
    "args a prefix of --trust-remote-code": ({"args": ["--trust-remote"]}, "args[0]: '--trust-remote'"),
    "args --api_key": ({"args": ["--api_key=k"]}, "args[0]: '--api_key=k'"),
    "env LD_PRELOAD": ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "env: LD_PRELOAD is not an engine tuning variable"),
    "env PYTHONPATH": ({"env": {"PYTHONPATH": "/tmp"}}, "env: PYTHONPATH is not an engine tuning variable"),
    "a unit line through fabric": ({"fabric": "ib0\n[Service]\nExecStartPre=+/bin/id"},
                                   "shard.fabric contains the control character '\\n'"),
    "a unit line through the model name": ({"model": "x\nExecStartPre=+/bin/id"},
                                           "shard.model contains the control character"),
    "a NUL in lineage": ({"lineage": "abc\x00ExecStartPre=/bin/id"}, "shard.lineage contains the control character"),
    "a model path out of the cache": ({"model_path": "/srv/models/../../etc"}, "model_path '/srv/models/../../etc'"),
    "a peer that is not address:port": ({"peers": ["10.0.0.1:1 --host 0.0.0.0"]}, "peers entry"),
    "an adapter name with a space": ({"ib_hcas": ["mlx5_0 x"]}, "ib_hcas entry"),
}


@pytest.mark.root
@pytest.mark.parametrize("case", list(PREFLIGHT))
def test_host_preflight_refuses_what_validate_refuses_and_every_bad_string(tmp_path: Path, case: str) -> None:
    bad, says = PREFLIGHT[case]
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    result = run_playbook(HERE / "preflight.yml", inv, extravars={"shards": [_shard(**bad)]})
    out = "\n".join(result.output_tail)
    assert not result.ok, out
    assert says in out, out


def test_a_plan_that_newly_trusts_remote_code_is_named_for_approval(tmp_path: Path) -> None:
    """Policy `auto` asks before a replica that runs the model's own code: the plan of the
    example site (deepseek-v3 sets `trust_remote_code: true`) names it, the same plan
    recorded as applied names nothing, and its unit's command line carries the flag."""
    from llmgw.planner.trust import widens_trust  # new with the fix

    site = tmp_path / "example"
    shutil.copytree(Path(__file__).resolve().parents[2] / "inventories" / "example", site,
                    ignore=shutil.ignore_patterns("state.json*"))
    plan = Plan.model_validate_json(run_cli("-C", str(site), "plan", "--json").stdout)
    empty = State()
    assert widens_trust(plan, empty) == ["deepseek-v3-1"]
    assert widens_trust(plan, plan.applied(empty)) == []
    shown = run_cli("-C", str(site), "plan")
    assert "runs the model's own code (trust_remote_code)" in shown.stdout
    rep = next(r for r in plan.desired.replicas if r.id == "deepseek-v3-1")
    words = command(Shard(engine=rep.engine, model=rep.model, model_path="/m", port=20000, gpus=(0,),
                          trust_remote_code=bool(rep.trust_remote_code)), Layout())
    assert words.count("--trust-remote-code") == 1
