"""`llmgw logs REPLICA`: playbooks/logs.yml run by the real ansible-runner.

One shard's node is this machine over Ansible's local connection (journalctl runs for
real; with no journald here it answers `-- No entries --`); the other shard's node is
an SSH host on a closed loopback port, so its error shows while the first shard's
journal still prints.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from llmgw.state import Replica, Shard, State, write_state
from tests.support.cli import run_cli


def make_site(root: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    (root / "catalog").mkdir(parents=True)
    (root / "llmgw.yaml").write_text("catalog: catalog\ninventory: hosts.yml\n")
    (root / "catalog" / "m.yaml").write_text(
        "models:\n  - name: tiny\n    source: hf://x/y/tiny.gguf\n    scaling: {min: 1}\n"
        "    profiles:\n      - {name: cpu, engine: llamacpp, gpus: 0}\n")
    (root / "hosts.yml").write_text(json.dumps({"all": {"children": {"llmgw_nodes": {"hosts": {
        "here": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "gone": {"ansible_host": "127.0.0.1", "ansible_port": closed, "ansible_user": "nobody",
                 "ansible_ssh_common_args": "-o ConnectTimeout=3 -o BatchMode=yes"}}}}}}))
    replica = Replica(id="tiny-1", model="tiny", profile="cpu", engine="llamacpp", state="ready",
                      endpoint="http://127.0.0.1:20000",
                      shards=[Shard(node="here", rank=0, port=20000, unit="llmgw-tiny-1-0.service"),
                              Shard(node="gone", rank=1, port=20000, unit="llmgw-tiny-1-1.service")])
    write_state(root / "state.json", State(replicas=[replica]))


def test_logs_per_shard_through_ansible(tmp_path: Path) -> None:
    make_site(tmp_path)
    r = run_cli("-C", str(tmp_path), "logs", "tiny-1", "--lines", "5", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["replica"] == "tiny-1" and data["lines"] == 5
    here, gone = data["shards"]
    assert (here["node"], here["unit"], here["rank"], here["error"]) == ("here", "llmgw-tiny-1-0.service", 0, None)
    assert here["lines"] == ["-- No entries --"]
    assert gone["node"] == "gone" and gone["lines"] == []
    assert gone["error"].startswith("unreachable:")

    r = run_cli("-C", str(tmp_path), "logs", "tiny-1", "-n", "5")
    assert r.exit_code == 1
    assert "==> here llmgw-tiny-1-0.service (shard 0) <==\n-- No entries --\n" in r.stdout
    assert "==> gone llmgw-tiny-1-1.service (shard 1) <==\ncould not read the journal: unreachable:" in r.stdout
    assert "Error: could not read the journal of 1 of 2 shards" in r.stderr
