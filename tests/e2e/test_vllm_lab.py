"""vLLM for real in the lab, next to llama.cpp, through the router.

A Hugging Face-format tiny Llama (safetensors, a BPE tokenizer with a chat template) is
served by the olah mirror on the lab network's gateway; `catalog validate` pins it;
apply fetches it on the host with huggingface_hub, links vLLM's CPU build there from the
venv scripts/build-engine-venvs built on the control host (mounted read-only on the lab's
hosts, llmgw_engine_venv_dirs: the role checks the version its python reports, installs
nothing), and starts `python -m vllm.entrypoints.openai.api_server`. The openai client chats and
streams with it and with the llama.cpp model beside it, and with its two tiny PEFT LoRA
adapters (scripts/make_tiny_peft_lora.py, in the model share), loaded at start (#37). Then the
catalog makes the adapters load at run time (`adapter_loading: runtime`, `max_loras: 1`) and the
vLLM replica's node is drained while a client sends without pause: apply moves it with zero
failed requests, the new vLLM starts with no adapter, and the router loads each on first use,
unloading the other past `max_loras`, each answering as it did when loaded at start.

The one vLLM start of the suite (and its move): about 3 GB of memory per vLLM, minutes
to install and start, so everything vLLM is checked here, in one lab.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from llmgw.apply.wiring import hosts_for
from llmgw.engines import versions
from llmgw.inventory import load_inventory
from llmgw.lab import ENGINE_VENVS_MOUNT, MODELS_MOUNT, cache_root
from llmgw.site import Site
from tests.support.hf_mirror import HfMirror, podman_gateway, running_mirror
from tests.support.lab import TINY, Lab, lab, shape
from tests.support.traffic import Hammer
from tests.support.vllm import script

# The suite's one vLLM lab, in make test. Seen passing end to end four times here: 66 min at a
# load of 20-27; then, while other engineers' work ran at nice 19 (load 8-11), 25 min with the
# first change below (drain apply 1,279 s, 2,991 requests during it) and 22 min with both (first
# apply 333 s, drain apply 950 s, 1,509 requests), 0 failed; then 537 s in a clean-clone make
# test on the quiet machine (57 min in all). Each vLLM start is four Python processes importing
# torch (API server, the model-registry subprocess, engine core, worker). Once the drain's new
# vLLM starved for over 18 min: vLLM's CPU backend pinned both hosts' workers to core 0 of the
# machine's two (the lab's hosts share them) and the old replica's, serving, held it. The lab
# profile now binds no cores (VLLM_CPU_OMP_THREADS_BIND, docs/engines.md), and the client pauses
# between requests (below).
pytestmark = [pytest.mark.lab, pytest.mark.engine, pytest.mark.vllm]

CATALOG = """\
# The tiny HF-format Llama from the site's mirror, served by vLLM's CPU build, with two adapters.
models:
  - name: tiny-hf
    source: hf://{repo}
    scaling: {{min: 1, max: 1}}
{loading}\
    adapters:
      - name: hf-sql
        source: file://{models}/tiny-peft-1
      - name: hf-poet
        source: file://{models}/tiny-peft-2
    profiles:
      - name: cpu
        engine: vllm
        gpus: 0
        min_memory_gb: 3
        # --enforce-eager: no torch.compile, which needs a C++ compiler on the host.
        args: ["--max-model-len", "512", "--dtype", "float32", "--enforce-eager"]
        # nobind: vLLM's CPU backend would pin each worker to core 0 of the host; the lab's
        # hosts share the machine's cores, so two vLLMs (a drain's old and new) would share one.
        env: {{VLLM_CPU_KVCACHE_SPACE: "1", VLLM_CPU_OMP_THREADS_BIND: "nobind"}}
"""
# The router loads the adapters on first use, one at a time on the replica (docs/adapters.md).
RUNTIME = "    adapter_loading: runtime\n    max_loras: 1\n"
ASK = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "temperature": 0, "seed": 7}
METRICS_PORT = 9102  # the router's /metrics, where it counts adapter loads and unloads


def catalog(repo: str, loading: str = "") -> dict[str, str]:
    return {"tiny.yaml": TINY, "tiny-hf.yaml": CATALOG.format(repo=repo, loading=loading, models=MODELS_MOUNT)}


def _peft_adapter(seed: int) -> None:
    """A tiny PEFT adapter of the mirror's tiny Llama in the model share (the hosts' /srv/models),
    written whole: another run may make or read the same one meanwhile (it is the same, by seed)."""
    final = cache_root() / "models" / f"tiny-peft-{seed}"
    if final.is_dir():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    part = Path(tempfile.mkdtemp(prefix=f".tiny-peft-{seed}.", dir=final.parent))
    script("make_tiny_peft_lora.py", str(part), "--seed", str(seed))
    os.chmod(part, 0o755)  # mkdtemp's 0700 would keep the hosts' engine users out
    try:
        os.rename(part, final)
    except OSError:  # another run's landed first
        for f in part.iterdir():
            f.unlink()
        part.rmdir()


def _adapter_loads(metrics_text: str) -> dict[tuple[str, str], float]:
    """llmgw_adapter_loads_total by (adapter, event), from the router's /metrics."""
    found = re.findall(r'^llmgw_adapter_loads_total\{adapter="([^"]+)",event="([^"]+)"\} ([0-9.e+]+)$',
                       metrics_text, re.M)
    return {(a, e): float(n) for a, e, n in found}


@pytest.fixture(scope="module")
def site_and_mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, HfMirror]]:
    _peft_adapter(1)
    _peft_adapter(2)
    with lab(tmp_path_factory.mktemp("vllm"), nodes=2, prefix="llmgw-vllm") as it, \
            running_mirror(host=podman_gateway(it.name)) as mirror:
        router = sorted(load_inventory(it.site / "hosts.yml").routers)[0]
        address = load_inventory(it.site / "hosts.yml").nodes[router].mgmt_address
        # One router worker: one book of what each replica has loaded, so the loads counted are exact.
        settings = {"llmgw_router_metrics_listen": f"{address}:{METRICS_PORT}", "llmgw_router_workers": 1}
        yield shape(it, catalog=catalog(mirror.repo), host_vars={router: settings},
                    config=f"mirror: {mirror.url}"), mirror


def test_vllm_next_to_llamacpp_chat_stream_and_drain(site_and_mirror: tuple[Lab, HfMirror]) -> None:
    the_lab, mirror = site_and_mirror
    validated = the_lab.ok("catalog", "validate")
    assert f"commit {mirror.commit}" in validated.stdout
    t0 = time.monotonic()
    the_lab.ok("apply", "--auto-approve")
    first_apply = time.monotonic() - t0
    by_model = {r.model: r for r in the_lab.state.replicas}
    assert sorted(by_model) == ["tiny", "tiny-hf"]
    assert all(r.state == "ready" for r in by_model.values())
    vllm = by_model["tiny-hf"]
    assert vllm.engine == "vllm"
    assert [a.name for a in vllm.adapters] == ["hf-sql", "hf-poet"]
    [shard] = vllm.shards
    shown = the_lab.per_host(f"systemctl show -p ExecStart --value {shard.unit}; readlink /opt/llmgw/engines/vllm; "
                             "ls /opt/llmgw/engines/vllm/lib/python3.11/site-packages 2>/dev/null || true")[shard.node]
    assert any("vllm.entrypoints.openai.api_server" in w for w in shown), shown
    # The lab's hosts take vLLM from the control host's built venv (mounted read-only), linked, not installed.
    assert f"{ENGINE_VENVS_MOUNT}/vllm-cpu-{versions.VLLM}" in shown, shown
    assert f"vllm_cpu-{versions.VLLM}.dist-info" in shown, shown
    assert "--lora-modules" in shown, shown  # loaded at start: adapter_loading's default
    # vLLM listens on its host's management address alone (#13), where the router reaches it.
    address = load_inventory(the_lab.site / "hosts.yml").nodes[shard.node].mgmt_address
    bound = the_lab.per_host(f"ss -Htln '( sport = :{shard.port} )' | awk '{{print $4}}'")[shard.node]
    assert bound == {f"{address}:{shard.port}"}, bound

    key = hosts_for(Site.load(the_lab.site)).create_key("vllm")["key"]
    api = openai.OpenAI(base_url=the_lab.router_url + "/v1", api_key=key, max_retries=0, timeout=60)
    for model in ("tiny-hf", "tiny"):
        answer = api.chat.completions.create(model=model, max_tokens=8,
                                             messages=[{"role": "user", "content": "Say hello."}])
        assert answer.choices[0].message.content is not None
        assert answer.usage is not None and answer.usage.completion_tokens > 0
    chunks = list(api.chat.completions.create(model="tiny-hf", max_tokens=8, stream=True,
                                              messages=[{"role": "user", "content": "Stream to me."}]))
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 2
    # Each adapter answers as itself (temperature 0, one seed), unlike the base and the other.
    answers = {name: api.chat.completions.create(model=name, **ASK).choices[0].message.content
               for name in ("tiny-hf", "hf-sql", "hf-poet")}
    assert len(set(answers.values())) == 3, answers
    listed = {m.id: (m.model_extra or {}).get("parent") for m in api.models.list().data}
    assert listed == {"tiny": None, "tiny-hf": None, "hf-sql": "tiny-hf", "hf-poet": "tiny-hf"}

    # The adapters load at run time from now on: a change of the replica, made by the same move.
    shape(the_lab, catalog=catalog(mirror.repo, RUNTIME), facts=False)
    the_lab.ok("catalog", "validate")

    # Drain the vLLM replica's node while a client keeps sending to it. A quarter second between
    # requests: without a pause the old replica's worker holds one of the lab's two shared cores
    # for the whole of the new one's start (21 min of drain apply, where the first start took 4).
    node = shard.node
    the_lab.ok("drain", node)
    hammer = Hammer(api, "tiny-hf", pause=0.25)
    hammer.start()
    t1 = time.monotonic()
    try:
        hammer.wait_for(3, timeout=120)
        assert hammer.ok >= 3 and hammer.failures == [], hammer.failures[:5]
        moved = the_lab.ok("apply", "--auto-approve")
        hammer.wait_for(3, timeout=120)  # requests reach the new replica
    finally:
        hammer.stop.set()
        hammer.join(120)
    drain_apply = time.monotonic() - t1
    assert hammer.failures == [], hammer.failures[:5]
    now = {r.model: r for r in the_lab.state.replicas}
    assert now["tiny-hf"].id != vllm.id and now["tiny-hf"].state == "ready", moved.stdout
    assert now["tiny-hf"].shards[0].node != node
    assert {n: us for n, us in the_lab.active_units().items() if us} == the_lab.recorded_units()

    # The new vLLM starts with no adapter and room for one; the router loads each on first use,
    # the second unloading the first, and each answers as it did when loaded at start.
    [new] = now["tiny-hf"].shards
    shown = the_lab.per_host(f"systemctl show -p ExecStart --value {new.unit}")[new.node]
    assert "--enable-lora" in shown and "--lora-modules" not in shown, shown
    for name in ("hf-sql", "hf-poet", "hf-sql", "tiny-hf"):
        assert api.chat.completions.create(model=name, **ASK).choices[0].message.content == answers[name], name
    router = sorted(load_inventory(the_lab.site / "hosts.yml").routers)[0]
    address = load_inventory(the_lab.site / "hosts.yml").nodes[router].mgmt_address
    loads = _adapter_loads(httpx.get(f"http://{address}:{METRICS_PORT}/metrics", timeout=10).text)
    assert loads == {("hf-sql", "load"): 2, ("hf-sql", "unload"): 1, ("hf-poet", "load"): 1,
                     ("hf-poet", "unload"): 1}, loads
    print(moved.stdout[-4000:])
    print(f"vllm e2e: first apply {first_apply:.0f} s, drain apply {drain_apply:.0f} s, "
          f"{hammer.ok} requests during the drain, 0 failed")
