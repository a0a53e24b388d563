"""Live views and keys from the bastion side of a lab (#19): no tunnel opened by hand.

One lab host (node1: router and engine, the real llama-server with the tiny model), one
apply. Then, from this control host as an operator's bastion:
- `llmgw keys create` makes a key in the router's own store (SQLite on node1, reached
  through Ansible) and the openai client uses it at once; revoked, the router refuses it;
- with a streamed response held open, `llmgw status` shows it in flight on its replica;
  after it, `status` and `replicas` show every replica's in-flight count and idle time,
  through SSH tunnels llmgw opened and closed itself;
- the router stopped, `status` names it as not known and shows no idle replica.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.lab import Lab, lab, shape

# Unproven: in its one full run (a loaded machine) the key test passed; the in-flight test
# did not fail its held-stream check (pytest -x went on), then spent minutes reading the
# rest of the stream (with log-probabilities, megabytes) through its 4 KiB window, while
# `llmgw replicas` from the bastion showed the request in flight (IN-FLIGHT 1, IDLE 3m)
# through its own tunnel; the router-down test did not run. Since: no log-probabilities,
# and the held stream is closed instead of read through.
pytestmark = [pytest.mark.lab, pytest.mark.engine]


@pytest.fixture(scope="module")
def the_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    # A lab of its own (not yet moved to the shared lab: its one run there could not finish).
    with lab(tmp_path_factory.mktemp("views"), nodes=1, prefix="llmgw-views") as it:
        shape(it).ok("apply", "--auto-approve")  # the lab's own catalog: one replica of tiny
        yield it


def ssh_children() -> list[str]:
    """ssh processes this test process started (the views' tunnels) that still run."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            if not d.name.isdigit() or int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) != os.getpid():
                continue
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if argv and os.path.basename(argv[0].decode()) == "ssh":
            out.append(b" ".join(argv).decode())
    return out


def client(the_lab: Lab, key: str, **kw: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=the_lab.router_url + "/v1", api_key=key, max_retries=0, timeout=60, **kw)  # type: ignore[arg-type]


def test_a_key_from_the_bastion_works_against_the_router_at_once(the_lab: Lab) -> None:
    made = the_lab.ok("keys", "create", "probe", "--json")
    data = json.loads(made.stdout)
    assert data["store"].startswith("the key store of router node1 (sqlite:") and "through Ansible" in data["store"]
    assert not list(the_lab.site.glob("**/*.sqlite"))  # no store file on the bastion that no router reads
    reply = client(the_lab, data["key"]).chat.completions.create(
        model="tiny", max_tokens=4, messages=[{"role": "user", "content": "hello"}])
    assert reply.choices[0].message.content is not None
    listed = json.loads(the_lab.ok("keys", "list", "--json").stdout)
    assert [k["name"] for k in listed["keys"]] == ["probe"]
    the_lab.ok("keys", "revoke", "probe")
    deadline = time.monotonic() + 30  # routers drop a revoked key within seconds
    while True:
        try:
            client(the_lab, data["key"]).models.list()
        except openai.AuthenticationError:
            break
        assert time.monotonic() < deadline, "the router still accepts a revoked key"
        time.sleep(0.5)


def test_status_and_replicas_show_in_flight_and_idle_for_every_replica(the_lab: Lab) -> None:
    key = json.loads(the_lab.ok("keys", "create", "views", "--json").stdout)["key"]
    # A response streamed to a client that stops reading (a small receive buffer; more
    # chunks than the buffers between hold): the router holds it in flight until the
    # client reads on or goes away. `ignore_eos`: the tiny model samples an end of text
    # early now and then (CI saw it), and a response that short fits in the buffers and
    # is over before the view is asked.
    slow = httpx.Client(transport=httpx.HTTPTransport(
        socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)]), timeout=120)
    try:
        stream = client(the_lab, key, http_client=slow).chat.completions.create(
            model="tiny", max_tokens=900, stream=True, extra_body={"ignore_eos": True},
            messages=[{"role": "user", "content": "Count to a thousand, slowly."}])
        try:
            next(iter(stream))
            held = json.loads(the_lab.ok("status", "--json").stdout)
            assert held["routers"] == ["node1"] and held["routers_not_known"] == []
            assert {r["id"]: r["in_flight"] for r in held["live"]} == {"tiny-1": 1}
        finally:
            stream.close()  # the client goes away (reading the rest through a 4 KiB window takes minutes)
    finally:
        slow.close()
    deadline = time.monotonic() + 120
    while any(r["in_flight"] for r in json.loads(the_lab.ok("status", "--json").stdout)["live"]):
        assert time.monotonic() < deadline, "the router still counts the closed stream in flight"
        time.sleep(1)

    view = json.loads(the_lab.ok("status", "--json").stdout)
    reps = json.loads(the_lab.ok("replicas", "--json").stdout)["replicas"]
    assert [r["id"] for r in reps] == [r["id"] for r in view["live"]] == [r.id for r in the_lab.state.replicas]
    for r in [*view["live"], *reps]:
        assert r["in_flight"] == 0 and r["used"] is True, r
        assert r["idle_seconds"] is not None and 0 <= r["idle_seconds"] < 300, r
    text = the_lab.ok("replicas").stdout
    header, row = text.splitlines()[:2]
    assert header.split()[4:6] == ["IDLE", "IN-FLIGHT"] and row.split()[4] != "?" and row.split()[5] == "0"
    assert "Live (0 in flight; routers asked: node1)" in the_lab.ok("status").stdout
    assert ssh_children() == []  # every tunnel closed with its call


def test_a_router_down_is_not_known_never_idle(the_lab: Lab) -> None:
    stop = the_lab.ansible("llmgw_routers", "-m", "ansible.builtin.systemd", "-a", "name=llmgw-router state=stopped")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    try:
        view = json.loads(the_lab.ok("status", "--json", "--idle-after", "0").stdout)
        assert view["routers_not_known"] == ["node1"] and view["idle"] is None and view["live"] is None
        assert any(n.startswith("router node1 is not known") for n in view["notes"])
        reps = json.loads(the_lab.ok("replicas", "--json").stdout)["replicas"]
        assert all(r["idle_seconds"] is None and r["in_flight"] is None for r in reps)
    finally:
        start = the_lab.ansible("llmgw_routers", "-m", "ansible.builtin.systemd",
                                "-a", "name=llmgw-router state=started")
        assert start.returncode == 0, start.stdout + start.stderr
