"""A two-host llama.cpp replica in the lab: rank 1 runs rpc-server, rank 0 runs
llama-server with `--rpc` to it, and the router serves the replica through rank 0.

Started in order (the worker listens before its leader starts), health from rank 0,
replaced as one (a changed profile: the new pair starts, the old pair drains and stops)
while a client sends requests without pause, with zero failed requests. Then a kill -9
of apply the moment a shard unit of a new pair exists on a host: plan and apply converge,
and no shard is left that the state does not record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import openai
import pytest

from llmgw.apply import hosts_for
from llmgw.inventory import load_inventory
from llmgw.site import Site
from tests.support.lab import VENV_BIN, Lab, lab
from tests.support.traffic import Hammer

pytestmark = [pytest.mark.lab, pytest.mark.engine]

CATALOG = """\
# A model spread over two lab hosts by llama.cpp RPC (rank 0: llama-server; rank 1: rpc-server).
models:
  - name: pair
    source: file:///srv/models/tiny.gguf
    scaling: {{min: 1, max: 1}}
    profiles:
      - name: cpu-2x
        engine: llamacpp
        nodes: 2
        gpus: 0
        args: ["--ctx-size", "{ctx}"]
"""


def write_catalog(the_lab: Lab, ctx: int) -> None:
    folder = the_lab.site / "catalog"
    for old in folder.glob("*.yaml"):
        old.unlink()
    (folder / "pair.yaml").write_text(CATALOG.format(ctx=ctx))


@pytest.fixture(scope="module")
def the_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with lab(tmp_path_factory.mktemp("multinode"), nodes=2, prefix="llmgw-mn") as it:
        write_catalog(it, 2048)
        it.ok("facts")
        yield it


def unit_on(the_lab: Lab, node: str, unit: str, command: str) -> str:
    """What `command` (with {unit}) printed on `node` (its stdout only, not Ansible's record)."""
    done = the_lab.ansible(node, "-m", "ansible.builtin.shell", "-a", command.format(unit=unit))
    assert done.returncode == 0, done.stdout + done.stderr
    return "".join(str(task["hosts"][node].get("stdout", "")) for play in json.loads(done.stdout)["plays"]
                   for task in play["tasks"] if node in task["hosts"])


def test_two_host_replica_serves_and_is_replaced_without_a_failed_request(the_lab: Lab) -> None:
    the_lab.ok("apply", "--auto-approve")
    [replica] = the_lab.state.replicas
    assert replica.state == "ready" and [s.rank for s in replica.shards] == [0, 1]
    leader, worker = replica.shards
    assert leader.node != worker.node
    assert {n: us for n, us in the_lab.shard_units().items() if us} == the_lab.recorded_units()
    assert {n: us for n, us in the_lab.active_units().items() if us} == the_lab.recorded_units()
    # The leader's unit names the worker's rpc-server; the worker runs rpc-server.
    lead_unit = unit_on(the_lab, leader.node, leader.unit, "cat /etc/systemd/system/{unit}")
    assert '"--rpc"' in lead_unit and f':{worker.port}"' in lead_unit
    work_unit = unit_on(the_lab, worker.node, worker.unit, "systemctl show -p ExecStart --value {unit}")
    assert "rpc-server" in work_unit
    # The worker really serves the leader: llama-server keeps a connection open to the worker's
    # rpc-server for as long as it holds the model's layers there (llama-server's journal
    # says nothing of RPC at its default verbosity).
    inventory = load_inventory(the_lab.site / "hosts.yml")
    lead_addr, work_addr = (inventory.nodes[s.node].mgmt_address for s in (leader, worker))
    peers = unit_on(the_lab, worker.node, worker.unit,
                    f"ss -Htn state established '( sport = :{worker.port} )' | awk '{{{{print $4}}}}'")
    assert lead_addr in {p.rsplit(":", 1)[0] for p in peers.split()}, peers
    # Each shard listens on its host's management address alone (#13): not on every interface,
    # not on loopback.
    for shard, addr in ((leader, lead_addr), (worker, work_addr)):
        bound = unit_on(the_lab, shard.node, shard.unit,
                        f"ss -Htln '( sport = :{shard.port} )' | awk '{{{{print $4}}}}'")
        assert bound.split() == [f"{addr}:{shard.port}"], bound

    key = hosts_for(Site.load(the_lab.site)).create_key("multinode")["key"]
    api = openai.OpenAI(base_url=the_lab.router_url + "/v1", api_key=key, max_retries=0, timeout=30)
    answer = api.chat.completions.create(model="pair", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert answer.usage is not None and answer.usage.completion_tokens == 8
    chunks = list(api.chat.completions.create(model="pair", max_tokens=8, stream=True,
                                              messages=[{"role": "user", "content": "stream"}]))
    assert len(chunks) >= 8

    # A changed profile replaces the pair as one, while a client sends without pause.
    write_catalog(the_lab, 1024)
    hammer = Hammer(api, "pair")
    hammer.start()
    try:
        hammer.wait_for(3, timeout=120)
        assert hammer.ok >= 3 and not hammer.failures, (hammer.ok, hammer.failures[:5])
        moved = the_lab.ok("apply", "--auto-approve")
        done_at = hammer.ok
        hammer.wait_for(3, timeout=120)  # requests reach the new pair
        reached = hammer.ok - done_at
    finally:
        hammer.stop.set()
        hammer.join(60)
    assert hammer.failures == [], hammer.failures[:5]
    assert reached >= 3, f"{reached} answers in 120 s after the move"
    [new] = the_lab.state.replicas
    assert new.id != replica.id and new.state == "ready", moved.stdout
    assert len(new.shards) == 2
    assert {n: us for n, us in the_lab.shard_units().items() if us} == the_lab.recorded_units()
    assert {n: us for n, us in the_lab.active_units().items() if us} == the_lab.recorded_units()
    print(f"multinode: {hammer.ok} requests during the replacement, 0 failed")


def test_kill_9_of_apply_leaves_no_orphan_shard(the_lab: Lab) -> None:
    write_catalog(the_lab, 512)
    before = {s.unit for r in the_lab.state.replicas for s in r.shards}
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen([str(VENV_BIN / "llmgw"), "-C", str(the_lab.site), "apply", "--auto-approve"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        # Wait for the event to interrupt: a unit of the new pair exists on some host.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            installed = set().union(*the_lab.shard_units().values())
            if any(u.removesuffix(".service") not in {b.removesuffix(".service") for b in before}
                   for u in installed):
                break
            assert proc.poll() is None, "apply finished before a new unit was seen"
        else:
            pytest.fail("apply never installed a unit of the new pair")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert any(r.state == "starting" for r in the_lab.state.replicas)

    the_lab.ok("apply", "--auto-approve")
    [replica] = the_lab.state.replicas
    assert replica.state == "ready"
    assert {n: us for n, us in the_lab.shard_units().items() if us} == the_lab.recorded_units()
    assert {n: us for n, us in the_lab.active_units().items() if us} == the_lab.recorded_units()
    final = the_lab.cli("plan", "--detailed-exitcode")
    assert final.exit_code == 0, final.stdout
