"""Demand drives the fleet (#16), on one lab of three hosts, two of them routers.

The controller runs here (the bastion), following no branch (`branch=None`: the site as it
is), its demand API on the lab network's gateway so the routers in the containers reach it;
apply hands the routers its token and the inventory names its URL. The catalog makes `tiny`
a `min: 0` model with short timings.

1. Ten concurrent first requests through router 1 (half streamed) all succeed, with one
   activation run.
2. Traffic through router 2 alone keeps the replica past its idle_timeout (router 1 reports
   it idle the whole time); with no traffic on either router it is stopped.
3. A load ramp through both routers takes tiny from one replica to max (2), and after the
   load stops back down to min (0), with zero failed requests.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import uvicorn

from llmgw.apply import wiring
from llmgw.apply.engine_keys import EngineKeyring
from llmgw.apply.wheelhouse import wheelhouse
from llmgw.controller import Controller
from llmgw.controller.api import demand_app
from llmgw.inventory import load_inventory
from llmgw.site import Site
from llmgw.yamlio import atomic_write, dumps_yaml, load_yaml
from tests.support.lab import Lab, lab
from tests.support.net import free_port
from tests.support.waiting import wait_until

# Both tests were seen passing here: the first (ten first requests through two routers, one
# activation, idle stops only when no router has traffic) in CI, the load ramp alone (below),
# and both in one run (7 min 55 s at load ~5; the ramp's load kept on until both routers had
# sent requests to both replicas: 1,161 streamed requests, 0 failed, back to 0 at 174 s).
pytestmark = [pytest.mark.lab, pytest.mark.engine]

IDLE = 25  # seconds: tiny's idle_timeout in this test's catalog
# activation_timeout (10m) is how long a router holds a first request: at a load of 20-29 on
# 2 cores one activation took 5 min 9 s, and a bound of 4m answered the ramp's first
# requests 503 (as it should: the bound passed). Clients wait as long (below).
# tiny's scaling.max. Two, not more: every scale action is an apply (an engine started or
# drained, the state delivered to both routers), minutes each on a loaded 2-core machine; a
# max of 2 shows each kind once (activate, scale up on load, scale down by draining, stop
# when idle); the cooldowns and a scale up of several replicas in one run are the unit
# tests' (tests/controller).
MAX = 2
CATALOG = f"""\
models:
  - name: tiny
    source: file:///srv/models/tiny.gguf
    scaling: {{min: 0, max: {MAX}, idle_timeout: {IDLE}s, target_in_flight: 2, up_cooldown: 5s,
               down_cooldown: 10s, activation_timeout: 10m}}
    profiles:
      - name: cpu
        engine: llamacpp
        gpus: 0
        min_memory_gb: 1
        args: ["--ctx-size", "2048"]
"""
MESSAGES: Any = [{"role": "user", "content": "hi"}]


class Demand:
    def __init__(self, lab_: Lab, ctl: Controller) -> None:
        self.lab = lab_
        self.ctl = ctl
        inv = load_inventory(lab_.site / "hosts.yml")
        self.urls = [f"http://{inv.routers[h].mgmt_address}:8000/v1" for h in sorted(inv.routers)]
        # Each lab router keeps its keys in its own SQLite store: a key made on each.
        self.keys = [router_key(lab_, h) for h in sorted(inv.routers)]

    def client(self, router: int, timeout: float = 600) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.urls[router], api_key=self.keys[router], max_retries=0, timeout=timeout)

    def runs(self, kind: str) -> list[Any]:
        return [r for r in self.ctl.runs.all() if r.summary.startswith(f"demand: {kind} tiny")]

    def replicas(self) -> list[str]:
        return [r.id for r in self.ctl.backend.read().replicas if r.model == "tiny"]


def router_key(lab_: Lab, host: str) -> str:
    """An API key made in `host`'s own store by its `llmgw keys create` (as playbooks/router_key.yml does)."""
    command = ("cd /var/lib/llmgw-router && set -a && . /etc/llmgw-router/router.env && set +a && "
               "exec runuser -u llmgw-router -- "
               "/opt/llmgw/router/current/venv/bin/llmgw keys create demand-test --json")
    done = lab_.ansible(host, "-m", "ansible.builtin.shell", "-a", command)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for play in json.loads(done.stdout)["plays"]:
        for task in play["tasks"]:
            return str(json.loads(task["hosts"][host]["stdout"])["key"])
    raise AssertionError(done.stdout[-2000:])


def gateway(network: str) -> str:
    done = subprocess.run(["podman", "network", "inspect", network], capture_output=True, text=True, check=True,
                          timeout=60)
    return str(json.loads(done.stdout)[0]["subnets"][0]["gateway"])


@pytest.fixture(scope="module")
def demand(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demand]:
    with lab(tmp_path_factory.mktemp("demand"), nodes=3, prefix="llmgw-demand") as it:
        (it.site / "catalog" / "tiny.yaml").write_text(CATALOG)
        port = free_port()
        url = f"http://{gateway(it.name)}:{port}"
        hosts = it.site / "hosts.yml"
        inv = load_yaml(hosts)
        routers = inv["all"]["children"]["llmgw_routers"]
        routers["hosts"]["node2"] = None  # a second router
        routers["vars"] = {"llmgw_router_controller_url": url}
        atomic_write(hosts, dumps_yaml(inv))
        it.ok("facts")
        # The routers keep the wheel the lab starts with: other engineers editing llmgw/ in a
        # shared checkout would otherwise make each of the controller's applies reinstall and
        # restart the routers in the middle of the test's traffic.
        built = wheelhouse()
        pin = pytest.MonkeyPatch()
        pin.setattr(wiring, "wheelhouse", lambda: built)
        ctl = Controller(it.site, branch=None, grace=30, say=lambda line: print(f"controller: {line}"))
        keyring = EngineKeyring.beside(Site.load(it.site).state_file)  # what each router's token is made from
        server = uvicorn.Server(uvicorn.Config(demand_app(ctl, keyring), host=url.split("//")[1].split(":")[0],
                                               port=port, log_level="warning"))
        api = threading.Thread(target=server.run, daemon=True)
        api.start()
        stop = threading.Event()
        loop = threading.Thread(target=ctl.serve_forever, args=(3600, stop), kwargs={"demand_interval": 1.0},
                                daemon=True)
        try:
            it.ok("apply", "--auto-approve")  # routers on node1 and node2 learn tiny is on demand
            assert it.state.replicas == []
            d = Demand(it, ctl)
            loop.start()
            wait_until(lambda: ctl.scaler.view()["routers_not_known"] == [] and ctl.scaler.routers, 60,
                       "both routers to report their load")
            yield d
        finally:
            stop.set()
            server.should_exit = True
            api.join(10)
            if loop.is_alive():
                loop.join(120)
            ctl.backend.close()
            pin.undo()


def test_first_requests_activate_once_and_idle_stops_are_fleet_wide(demand: Demand) -> None:
    d = demand
    answers: list[str] = []
    failures: list[str] = []

    def first(i: int) -> None:
        try:
            api = d.client(0)
            if i % 2:
                chunks = list(api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=3, stream=True))
                answers.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
            else:
                answers.append(api.chat.completions.create(model="tiny", messages=MESSAGES,
                                                           max_tokens=3).choices[0].message.content or "")
        except Exception as exc:  # every failure counts
            failures.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=first, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(400)
    assert failures == [] and len(answers) == 10, failures
    assert len(d.runs("activate")) == 1, [r.summary for r in d.ctl.runs.all()]
    # The routers route as soon as the apply delivers the state; the run is marked applied
    # just after the apply returns.
    wait_until(lambda: d.runs("activate")[0].status == "applied", 120, "the activation run to be marked applied")
    (rid,) = d.replicas()

    # Traffic through router 2 alone, for longer than idle_timeout: the replica stays, although
    # router 1 reports it idle all along.
    api2 = d.client(1)
    began = time.monotonic()
    while time.monotonic() - began < IDLE + 10:
        assert api2.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2).choices
        time.sleep(3)  # a client's pace, not a wait for an event
    assert d.replicas() == [rid] and d.runs("stop-idle") == []
    r1 = [r for r in d.ctl.scaler.reports.fresh(time.monotonic()) if r.router == "node1"]
    assert r1 and r1[0].replicas[rid].idle_s >= IDLE

    # No traffic anywhere: stopped after idle_timeout.
    wait_until(lambda: d.replicas() == [], IDLE + 240, "the idle replica to be stopped")
    # The state (which d.replicas() reads) is written before the run is marked applied.
    wait_until(lambda: [r.status for r in d.runs("stop-idle")] == ["applied"], 120,
               "the idle-stop run to be marked applied")
    (stopped,) = d.runs("stop-idle")
    assert "no request on any router" in stopped.summary
    assert all(not us for us in d.lab.active_units().values())


class Load(threading.Thread):
    """Streamed completions one after another through one router; every failure is kept."""

    def __init__(self, api: openai.OpenAI, stop: threading.Event, failures: list[str]) -> None:
        super().__init__(daemon=True)
        self.api, self.stop, self.failures, self.ok = api, stop, failures, 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                chunks = list(self.api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=48,
                                                               stream=True))
                assert chunks
                self.ok += 1
            except Exception as exc:  # every failure counts, whatever it is
                self.failures.append(f"{type(exc).__name__}: {exc}")


# Seen passing end to end run alone (2026-12-01, load 3-7 on 2 cores): 7 min 19 s wall, of it
# 2 min 10 s the module's lab, facts and first apply, 4 min 40 s the ramp, the rest teardown.
# The activation took 72 s (engine 49 s, delivery to both routers 23 s), the scale up 1 -> 2
# 98 s (engine 78 s), the load stopped at 159 s with 795 streamed requests ok and 0 failed;
# the drain of one replica (after the 10 s down cooldown) and the idle stop of the last
# (after 25 s without a request on either router) took 58 s and 32 s: back to 0 at 280 s.
# Earlier runs at a load of 20-35 failed on what is fixed now: the scaler's view lagged a
# tick blocked by a whole apply (it reads the state), each demand run ran the whole router
# role on both routers (they deliver the state alone), and a 5 min activation outlasted a
# 4m activation_timeout (now 10m).
def test_a_load_ramp_scales_to_max_and_back_to_min_without_a_failed_request(demand: Demand) -> None:
    d = demand
    stop = threading.Event()
    failures: list[str] = []
    workers: list[Load] = []
    peak = 0
    began = time.monotonic()

    def mark(what: str) -> None:  # the ramp's timings, for the log (not asserted: bench/ holds timings)
        print(f"ramp: {what} at {time.monotonic() - began:.0f} s")

    try:
        for n in range(6):  # ramp up: six clients through both routers, at a target of 2 per replica
            w = Load(d.client(n % 2), stop, failures)
            w.start()
            workers.append(w)
            if n == 0:
                wait_until(lambda: len(d.replicas()) == 1, 300, "the first replica")
                mark("first replica recorded (activation started)")
        # A bound for the activation and scale-up runs (each starts an engine and delivers the
        # state to both routers), not a speed check: on a loaded 2-core machine each took minutes.
        wait_until(lambda: len([r for r in d.ctl.backend.read().replicas if r.state == "ready"]) == MAX, 900,
                   f"tiny to scale to its max of {MAX}")
        mark(f"max ({MAX}) ready")
        peak = len(d.replicas())
        # Load stays on until each router has sent requests to each replica: "0 failed" then
        # covers traffic moving onto the new replica, not only the runs that started it.
        seen: set[tuple[str, str]] = set()

        def every_router_uses_every_replica() -> bool:
            for report in d.ctl.scaler.reports.fresh(time.monotonic()):
                seen.update((report.router, rid) for rid, load in report.replicas.items() if load.in_flight)
            return {(router, rid) for router in ("node1", "node2") for rid in d.replicas()} <= seen

        wait_until(every_router_uses_every_replica, 300, "both routers to send requests to both replicas")
        mark("both routers sending to both replicas")
        ups = d.runs("scale-up")
        assert ups and all("target 2 per replica" in r.summary for r in ups), [r.summary for r in ups]
        # The scaler's view counts the state's replicas at once, although the run that made the
        # last one is still delivering the state to the routers (which once took over 60 s here).
        assert d.ctl.scaler.view()["models"]["tiny"]["current"] == MAX
        assert d.ctl.scaler.view()["models"]["tiny"]["last_decision"]
    finally:
        stop.set()
        for w in workers:
            w.join(120)
    mark(f"load stopped: {sum(w.ok for w in workers)} requests ok, {len(failures)} failed")
    assert failures == [] and sum(w.ok for w in workers) > 0, failures[:5]
    assert peak == MAX
    # The load stopped: down to one by draining, then to min (0) once idle on both routers.
    wait_until(lambda: d.replicas() == [], 900, "tiny to go back to min 0")
    mark("back to min (0)")
    # The state is written before the last run is marked applied: wait for the mark.
    wait_until(lambda: all(r.status == "applied" for r in d.runs("scale-down") + d.runs("stop-idle")), 120,
               "every scale-down run to be marked applied")
    downs = d.runs("scale-down") + d.runs("stop-idle")
    assert len(downs) >= MAX, [r.summary for r in downs]  # MAX - 1 drained on load, the last when idle
    assert all(not us for us in d.lab.active_units().values())


@pytest.fixture(autouse=True)
def _print_runs(demand: Demand) -> Iterator[None]:
    yield
    print("runs:", *[f"{r.id} {r.status} {r.summary}" for r in demand.ctl.runs.all()], sep="\n  ")
