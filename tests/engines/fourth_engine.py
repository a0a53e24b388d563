"""A fourth engine, for tests only: `tinyserve`, a made-up binary engine that serves chat,
rerank and tokenize, from GGUF weights, on one node. It is what a new engine's module in
llmgw/engines/ would hold (docs/engines.md), registered by the test that uses it and by
`sitecustomize.py` in a child process (an Ansible run) that must know it too.
"""

from __future__ import annotations

from llmgw.engines.descriptor import Engine
from llmgw.engines.flags import OWNED, TRUST, table
from llmgw.engines.shard import Layout, Shard

NAME = "tinyserve"


def command(shard: Shard, layout: Layout) -> list[str]:
    return [f"{layout.install_dir}/{NAME}/{NAME}", "serve", shard.model_path, "--name", shard.model,
            "--listen", f"{layout.listen_address}:{shard.port}", *shard.args]


ENGINE = Engine(
    name=NAME, title="TinyServe", command=command, install="binary", distribution=None, version="",
    programs=(NAME,),
    flags=table(listen_address=(OWNED, ["--listen"]), served_name=(OWNED, ["--name"]),
                api_key=(OWNED, ["--key"]), files_outside_the_weights=(TRUST, ["--plugin-dir"])),
    parser="exact", key="env", key_env="TINYSERVE_API_KEY",
    endpoints={"POST /v1/chat/completions": "/v1/chat/completions", "POST /v1/rerank": "/v1/rerank",
               "POST /v1/tokenize": "/tokenize"},
    weight_formats=("gguf",), multi_node="none", remote_code=False, gpu_build=None)

SITECUSTOMIZE = """\
from llmgw.engines import register
from tests.engines.fourth_engine import ENGINE

register(ENGINE)
"""
