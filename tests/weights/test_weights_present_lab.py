"""Weights where they are, on a lab host: the lab's tiny model is an operator's file in the
hosts' model dir (`file:///srv/models/tiny.gguf`, a read-only share), so its replica is served
from there with no download (#35). Shown by the plan (present_at), the weights role's own tasks
(the check in place ran, no download started or followed), the host's cache (nothing of it
there, not even a lock or progress file), the engine's unit (`--model /srv/models/tiny.gguf`)
and a chat completion through the router."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

import llmgw.apply.hosts as hosts_module
from llmgw.apply import hosts_for
from llmgw.runner import RunEvent, run_playbook
from llmgw.site import Site
from llmgw.weights.names import cache_name
from tests.support.lab import Lab, lab, shape

pytestmark = [pytest.mark.lab, pytest.mark.engine]

TINY = "file:///srv/models/tiny.gguf"  # the lab catalog's source
CACHE = "/var/cache/llmgw"


@pytest.fixture(scope="module")
def the_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    # One host of its own (router and replica) rather than a turn on the shared lab: the turn's
    # clearing apply alone cost 53-65 s at load 7-12 (#33, 2026-12-04), starting and removing a
    # host 5-10 s, and nothing here needs a second host.
    with lab(tmp_path_factory.mktemp("present"), nodes=1, prefix="llmgw-present") as it:
        yield shape(it)  # the lab's own catalog: one tiny llama.cpp replica


def test_an_operators_file_is_served_in_place_with_no_download(the_lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    planned = json.loads(the_lab.ok("plan", "--json").stdout)
    [replica] = [r for r in planned["desired"]["replicas"] if r["model"] == "tiny"]
    [shard] = replica["shards"]
    assert shard["present_at"] == "/srv/models/tiny.gguf"
    node = shard["node"]

    ran: list[tuple[str, str, bool]] = []  # (host, task, changed) of every task that ran, from Ansible's events
    real = run_playbook

    def spy(playbook: Any, *args: Any, on_event: Callable[[RunEvent], None] | None = None, **kw: Any) -> Any:
        def tap(event: RunEvent) -> None:
            if event.kind == "host_ok" and event.host and event.task:
                ran.append((event.host, event.task, bool(event.result.get("changed"))))
            if on_event is not None:
                on_event(event)

        return real(playbook, *args, on_event=tap, **kw)

    monkeypatch.setattr(hosts_module, "run_playbook", spy)
    the_lab.ok("apply", "--auto-approve")
    assert [(r.id, r.state) for r in the_lab.state.replicas] == [("tiny-1", "ready")]
    mine = [(task, changed) for host, task, changed in ran if host == node]
    assert ("Check the operator's copies served in place", False) in mine, mine
    downloads = ("Queue the downloads", "Start the downloads", "Follow the downloads", "Collect the downloads' results")
    assert not [t for t, _c in mine if t in downloads], mine

    name = cache_name(TINY)
    cached = the_lab.per_host(f"ls -A {CACHE} 2>/dev/null || true")
    assert not [(h, e) for h, entries in cached.items() for e in entries if name in e], cached
    unit = the_lab.state.replicas[0].shards[0].unit
    units = the_lab.per_host(f"systemctl show -p ExecStart --value {unit} 2>/dev/null "
                             "| grep -c -- '--model /srv/models/tiny.gguf' || true")
    assert units[node] == {"1"}, units  # the engine reads the operator's file itself

    key = hosts_for(Site.load(the_lab.site)).create_key("weights-present")["key"]
    with openai.OpenAI(base_url=the_lab.router_url + "/v1", api_key=key, max_retries=0, timeout=60) as api:
        answer = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                             max_tokens=4)
    assert answer.choices[0].message.content is not None
