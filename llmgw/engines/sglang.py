"""SGLang command lines (pinned in llmgw.engines.versions): `python -m sglang.launch_server`.

`--tp` counts every GPU of the replica, across nodes; the ranks meet at --dist-init-addr,
the leader's port + 10000. With an API key (rank 0 serves HTTP), `--config` names the
file holding it.
"""

from __future__ import annotations

from llmgw.engines.shard import Layout, Shard


def _base(shard: Shard, layout: Layout) -> list[str]:
    words = [layout.venv_python("sglang"), "-m", "sglang.launch_server", "--model-path", shard.model_path,
             "--served-model-name", shard.model, "--host", layout.listen_address, "--port", str(shard.port),
             "--tp", str(shard.gpus_per_node * shard.nodes)]
    # SGLang reads its API key only as an option (no environment variable): from a YAML file
    # of options the role writes (`api-key: ...`, readable by the engine's group only), so
    # the key is on no command line. SGLang merges the file's options under the command's,
    # each key as `--<key>` as written: `api_key` would be refused (seen with 0.5.23).
    if shard.key_config:
        words += ["--config", shard.key_config]
    if shard.trust_remote_code:
        words.append("--trust-remote-code")
    return words


def single_node(shard: Shard, layout: Layout) -> list[str]:
    return _base(shard, layout) + list(shard.args)


def multi_node(shard: Shard, layout: Layout) -> list[str]:
    return [*_base(shard, layout), "--nnodes", str(shard.nodes), "--node-rank", str(shard.rank),
            "--dist-init-addr", f"{shard.leader}:{shard.init_port}", *shard.args]


def command(shard: Shard, layout: Layout) -> list[str]:
    return multi_node(shard, layout) if shard.multi_node else single_node(shard, layout)
