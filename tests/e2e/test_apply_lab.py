"""The whole loop on a lab of three hosts with the real llama-server and tiny model.

plan -> apply -> chat completions through the router with the openai client (a key made
in the router's own store) -> drain the replica's node while a client sends requests
without pause -> apply moves the replica with zero failed requests -> scale to 2 ->
remove the model -> no shard unit left anywhere. Then a kill -9 of apply during the
shard step, after which plan shows what is left and apply converges, the state
recording exactly the units the hosts run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import openai
import pytest

from llmgw.apply import hosts_for
from llmgw.apply.hosts import TRACE_ENV
from llmgw.site import Site
from tests.support.lab import TINY, VENV_BIN, Lab, lab, shape
from tests.support.traffic import Hammer

pytestmark = [pytest.mark.lab, pytest.mark.engine]


@pytest.fixture(scope="module")
def the_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    # A lab of its own (not yet moved to the shared lab: not seen passing there).
    with lab(tmp_path_factory.mktemp("e2e")) as it:
        yield shape(it)  # the lab's own catalog: tiny


def client(the_lab: Lab, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=the_lab.router_url + "/v1", api_key=key, max_retries=0, timeout=30)


def test_plan_apply_chat_drain_scale_remove(the_lab: Lab) -> None:
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    plan = the_lab.cli("plan", "--detailed-exitcode")
    assert plan.exit_code == 2, plan.stdout + plan.stderr
    assert "Plan: 1 to add, 0 to change, 0 to destroy." in plan.stdout

    refused = the_lab.cli("apply")  # not a terminal, no --auto-approve
    assert refused.exit_code != 0 and "--auto-approve" in refused.stderr
    assert the_lab.state.serial == 0

    the_lab.ok("apply", "--auto-approve")
    timings["first apply"] = time.monotonic() - t0
    state = the_lab.state
    assert [(r.id, r.state) for r in state.replicas] == [("tiny-1", "ready")]
    assert the_lab.shard_units() == {**{h: set() for h in ("node1", "node2", "node3")},
                                     **{n: {u} for n, us in the_lab.recorded_units().items() for u in us}}

    again = the_lab.cli("plan", "--detailed-exitcode")
    assert again.exit_code == 0, again.stdout
    noop = the_lab.ok("apply", "--auto-approve")  # contacts no host
    assert "No changes" in noop.stdout

    key = hosts_for(Site.load(the_lab.site)).create_key("e2e")["key"]
    api = client(the_lab, key)
    answer = api.chat.completions.create(model="tiny", max_tokens=8,
                                         messages=[{"role": "user", "content": "Say hello to the lab."}])
    assert answer.choices[0].message.content
    assert answer.usage is not None and answer.usage.completion_tokens == 8
    chunks = list(api.chat.completions.create(model="tiny-chat", max_tokens=8, stream=True,
                                              messages=[{"role": "user", "content": "Stream to me."}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) >= 8 and text

    # Drain the replica's node while a client sends requests without pause.
    old = state.replicas[0]
    node = old.shards[0].node
    the_lab.ok("drain", node)
    hammer = Hammer(api, "tiny-chat")  # through the alias
    hammer.start()
    t1 = time.monotonic()
    try:
        hammer.wait_for(3)
        moved = the_lab.ok("apply", "--auto-approve")
        # Requests keep coming after the move: wait for three more answered (by the new
        # replica), not for a second of wall time.
        hammer.wait_for(3)
    finally:
        hammer.stop.set()
        hammer.join(60)
    timings["drain apply"] = time.monotonic() - t1
    assert hammer.failures == [], hammer.failures[:5]
    assert hammer.ok > 3
    state = the_lab.state
    assert len(state.replicas) == 1 and state.replicas[0].id != old.id, moved.stdout
    assert state.replicas[0].state == "ready" and state.replicas[0].shards[0].node != node
    units = the_lab.shard_units()
    assert old.shards[0].unit not in units[node]
    assert {n: us for n, us in units.items() if us} == the_lab.recorded_units()

    the_lab.ok("uncordon", node)
    t2 = time.monotonic()
    the_lab.ok("scale", "tiny", "--min", "2")
    the_lab.ok("apply", "--auto-approve")
    timings["scale apply"] = time.monotonic() - t2
    assert sorted(r.state for r in the_lab.state.replicas) == ["ready", "ready"]
    assert {n: us for n, us in the_lab.shard_units().items() if us} == the_lab.recorded_units()
    answer = api.chat.completions.create(model="tiny", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content is not None

    t3 = time.monotonic()
    the_lab.ok("model", "remove", "tiny")
    the_lab.ok("apply", "--auto-approve")
    timings["remove apply"] = time.monotonic() - t3
    assert the_lab.state.replicas == [] and the_lab.state.models == []
    assert all(not us for us in the_lab.shard_units().values())
    assert all(not us for us in the_lab.active_units().values())
    print("e2e timings:", {k: round(v, 1) for k, v in timings.items()})


def test_kill_9_during_the_shard_step_then_plan_and_apply_converge(the_lab: Lab) -> None:
    # Whatever the first test left, start from a catalog that wants the tiny model again.
    (the_lab.site / "catalog").mkdir(exist_ok=True)
    (the_lab.site / "catalog" / "tiny.yaml").write_text(TINY)
    before = the_lab.state.serial
    trace = the_lab.site / "apply-trace.txt"  # apply appends "<step>\t<task>" as each task starts
    trace.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", TRACE_ENV: str(trace)}
    proc = subprocess.Popen([str(VENV_BIN / "llmgw"), "-C", str(the_lab.site), "apply", "--auto-approve"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        # The event itself: a task of the shard step has started on the hosts (fetching the
        # weights, or the engine role), so apply is inside the step, whatever the machine's speed.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            started = trace.read_text().splitlines() if trace.exists() else []
            if any(line.startswith("start\t") for line in started):
                break
            assert proc.poll() is None, "apply finished before it could be killed"
            time.sleep(0.05)  # polling the trace file, with the deadline above
        else:
            pytest.fail("apply never started the shard step")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    killed = the_lab.state
    assert killed.serial > before
    assert [r.state for r in killed.replicas] == ["starting"]

    plan = the_lab.cli("plan", "--detailed-exitcode")
    assert plan.exit_code == 2, plan.stdout + plan.stderr
    assert "being started when the last apply stopped" in plan.stdout
    the_lab.ok("apply", "--auto-approve")
    state = the_lab.state
    assert [r.state for r in state.replicas] == ["ready"]
    assert killed.replicas[0].id not in {r.id for r in state.replicas}
    # The state records exactly the units the hosts have and run.
    assert {n: us for n, us in the_lab.shard_units().items() if us} == the_lab.recorded_units()
    assert {n: us for n, us in the_lab.active_units().items() if us} == the_lab.recorded_units()
    the_lab.ok("facts")
    final = the_lab.cli("plan", "--detailed-exitcode")
    assert final.exit_code == 0, final.stdout

    # Drift: a shard unit no state records (started by hand, or by a lost state) is found by
    # facts, shown by plan and removed by apply.
    shard = state.replicas[0].shards[0]
    stray = "llmgw-tiny-77-0"
    made = the_lab.ansible(shard.node, "-m", "ansible.builtin.shell", "-a",
                           f"cd /etc/systemd/system && sed 's/\"{shard.port}\"/\"20077\"/' {shard.unit} "
                           f"> {stray}.service && systemctl daemon-reload && systemctl start {stray}")
    assert made.returncode == 0, made.stdout
    assert f"{stray}.service" in the_lab.active_units()[shard.node]
    the_lab.ok("facts")
    drift = the_lab.cli("plan", "--detailed-exitcode")
    assert drift.exit_code == 2 and stray in drift.stdout, drift.stdout
    the_lab.ok("apply", "--auto-approve")
    assert {n: us for n, us in the_lab.active_units().items() if us} == the_lab.recorded_units()
    assert {n: us for n, us in the_lab.shard_units().items() if us} == the_lab.recorded_units()
