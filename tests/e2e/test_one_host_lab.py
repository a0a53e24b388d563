"""One lab host running what apply installs (router and a tiny llama.cpp replica), for two
areas that need only one host.

LoRA adapters (issue #37): a catalog gives the tiny model two tiny GGUF adapters
(scripts/make_tiny_lora_gguf.py, in the model share beside the tiny model); `catalog
validate` reads their headers; apply fetches them beside the base with the weights role and
starts llama-server with them; through the router, with the openai client, each adapter's
name (and alias) answers differently from the base and from the other, the same each time
(temperature 0, one seed); the router counts each adapter's requests under its own name and
`/v1/models` lists the adapters with their parent.

The Batch API (issue #36): a JSONL of 200 chat requests uploaded to the lab's router with the
openai client, run as a batch while an interactive client talks to the same replica; the
output file answers every custom_id once, and the usage `llmgw keys usage` reads from the
router host's store is the batch's. That the installed, hardened router unit can keep the
files and run the batch is what this adds to tests/router/test_batches.py, where a router
killed mid-batch resumes without sending anything twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from llmgw.apply import hosts_for
from llmgw.inventory import load_inventory
from llmgw.site import Site
from tests.support.lab import REPO, Lab, lab, shape
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.engine]

MODELS = Path(os.environ.get("LLMGW_CACHE", Path.home() / ".cache" / "llmgw")) / "models"  # /srv/models on the hosts
METRICS_PORT = 9102
ASK = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 12, "temperature": 0, "seed": 7}
CATALOG = """\
models:
  - name: tiny
    aliases: [tiny-chat]
    source: file:///srv/models/tiny.gguf
    scaling: {min: 1, max: 1}
    profiles:
      - name: cpu
        engine: llamacpp
        min_memory_gb: 1
        args: ["--ctx-size", "2048"]
    adapters:
      - name: tiny-sql
        aliases: [sql]
        source: file:///srv/models/tiny-lora-1.gguf
      - name: tiny-poet
        source: file:///srv/models/tiny-lora-2.gguf
"""


def _adapter(seed: int) -> None:
    """The adapter in the model share, written whole (another run may read it meanwhile)."""
    final = MODELS / f"tiny-lora-{seed}.gguf"
    part = MODELS / f".tiny-lora-{seed}.{os.getpid()}.part"
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_tiny_lora_gguf.py"), str(part), "--seed",
                    str(seed)], check=True, capture_output=True)
    os.replace(part, final)


@pytest.fixture(scope="module")
def the_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    _adapter(1)
    _adapter(2)
    # A lab of its own (one host: router and replica): the router's own settings below make
    # its first apply install the router whichever lab it is, and on the shared lab its turn
    # then needs a clearing apply that installs it once more (#33: 46 s of teardown in CI),
    # where a host of its own costs seconds to start and remove.
    with lab(tmp_path_factory.mktemp("adapters"), nodes=1, prefix="llmgw-lora") as it:
        address = load_inventory(it.site / "hosts.yml").nodes["node1"].mgmt_address
        node1 = {"llmgw_router_metrics_listen": f"{address}:{METRICS_PORT}", "llmgw_router_workers": 1}
        yield shape(it, catalog={"tiny.yaml": CATALOG}, host_vars={"node1": node1})


def test_two_adapters_on_one_llamacpp_replica_answer_as_themselves(the_lab: Lab) -> None:
    the_lab.ok("catalog", "validate")  # reads both adapters' GGUF headers (type adapter, llama)
    plan = the_lab.ok("plan").stdout
    assert "Plan: 1 to add, 0 to change, 0 to destroy." in plan
    the_lab.ok("apply", "--auto-approve")
    [replica] = the_lab.state.replicas
    assert [a.name for a in replica.adapters] == ["tiny-sql", "tiny-poet"]

    key = hosts_for(Site.load(the_lab.site)).create_key("adapters-e2e")["key"]
    api = openai.OpenAI(base_url=the_lab.router_url + "/v1", api_key=key, max_retries=0, timeout=30)
    answers = {}
    for name in ("tiny", "tiny-sql", "sql", "tiny-poet"):
        got = [api.chat.completions.create(model=name, **ASK).choices[0].message.content for _ in range(2)]
        assert got[0] and got[0] == got[1], (name, got)  # temperature 0, one seed: the same each time
        answers[name] = got[0]
    assert answers["sql"] == answers["tiny-sql"]
    assert len({answers["tiny"], answers["tiny-sql"], answers["tiny-poet"]}) == 3, answers

    listed = {m.id: (m.model_extra or {}).get("parent") for m in api.models.list().data}
    assert listed == {"tiny": None, "tiny-sql": "tiny", "tiny-poet": "tiny"}

    address = load_inventory(the_lab.site / "hosts.yml").nodes["node1"].mgmt_address
    metrics = httpx.get(f"http://{address}:{METRICS_PORT}/metrics", timeout=10).text
    for model, n in (("tiny", 2), ("tiny-sql", 4), ("tiny-poet", 2)):
        assert f'llmgw_requests_total{{model="{model}",status="200"}} {float(n)}' in metrics, model


def _requests(n: int) -> bytes:
    return b"".join(json.dumps({"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
                                "body": {"model": "tiny", "max_tokens": 2, "temperature": 0,
                                         "messages": [{"role": "user", "content": f"Say {i}."}]}}).encode() + b"\n"
                    for i in range(n))


def _talk(api: openai.OpenAI, stop: threading.Event, answered: list[int], failed: list[BaseException]) -> None:
    while not stop.is_set():
        try:
            api.chat.completions.create(model="tiny", max_tokens=2, messages=[{"role": "user", "content": "Hi."}])
            answered.append(1)
        except BaseException as exc:  # reported to the test
            failed.append(exc)
            return


def test_a_batch_of_200_runs_on_the_lab_router_beside_interactive_traffic(the_lab: Lab) -> None:
    if not the_lab.state.replicas:  # alone (-k): the module's first test applies the catalog
        the_lab.ok("apply", "--auto-approve")
    hosts = hosts_for(Site.load(the_lab.site))
    batcher = hosts.create_key("batch-e2e")
    api = openai.OpenAI(base_url=the_lab.router_url + "/v1", api_key=batcher["key"], max_retries=0, timeout=30)
    chat = openai.OpenAI(base_url=the_lab.router_url + "/v1", api_key=hosts.create_key("chat-e2e")["key"],
                         max_retries=0, timeout=30)

    data = _requests(200)
    uploaded = api.files.create(file=("requests.jsonl", data), purpose="batch")
    assert (uploaded.purpose, uploaded.status, uploaded.bytes) == ("batch", "processed", len(data))
    assert api.files.content(uploaded.id).content == data  # kept whole on the router host's disk

    stop, answered, failed = threading.Event(), list[int](), list[BaseException]()
    talker = threading.Thread(target=_talk, args=(chat, stop, answered, failed), daemon=True)
    talker.start()
    try:
        batch = api.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                   completion_window="24h")
        done = wait_until(lambda: (b := api.batches.retrieve(batch.id)).status in ("completed", "failed") and b,
                          300, "the batch to end")
    finally:
        stop.set()
        talker.join(60)
    assert not failed, failed
    assert answered, "the interactive client got no answer while the batch ran"
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (200, 0)
    assert done.output_file_id is not None and done.error_file_id is None
    out = [json.loads(line) for line in api.files.content(done.output_file_id).text.splitlines()]
    assert sorted(o["custom_id"] for o in out) == sorted(f"req-{i}" for i in range(200))
    assert all(o["response"]["status_code"] == 200 and o["error"] is None for o in out)

    # Charged to the batch's key, in the store on the router host, as the output file says.
    prompt = sum(o["response"]["body"]["usage"]["prompt_tokens"] for o in out)
    completion = sum(o["response"]["body"]["usage"]["completion_tokens"] for o in out)
    assert done.usage is not None and (done.usage.input_tokens, done.usage.output_tokens) == (prompt, completion)

    def charged() -> bool:
        usage = json.loads(the_lab.ok("keys", "usage", "--json").stdout)
        mine = [k for k in usage["keys"] if k["id"] == batcher["id"]]
        return [(k["requests"], k["prompt_tokens"], k["completion_tokens"]) for k in mine] == \
            [(200, prompt, completion)]

    wait_until(charged, 60, "the batch's usage in the router host's store")
