"""Hosts fetch weights only from the site's endpoint: a catalog `https://` source on any other
host (an internal service, a cloud metadata address) is refused by `catalog validate` and
`plan` with the key's file:line, and again by the weights module on the host before it opens
anything. Each attack points at a listener that records every connection; the control points
the same listener's address as the endpoint and sees it asked."""

from __future__ import annotations

import json
from pathlib import Path

from tests.security.test_catalog_hostile import llmgw, make_site
from tests.security.test_plan_network import catalog, listener
from tests.support.ansible import REPO, ansible_env, run_playbook


def test_validate_and_plan_refuse_a_source_on_another_host(tmp_path: Path) -> None:
    with listener() as (other, seen), listener() as (mirror, _):
        root = make_site(tmp_path, catalog(f"{other}/m.gguf"), config=f"mirror: {mirror}\n")
        for verb in (("catalog", "validate"), ("catalog", "validate", "--offline"), ("plan",)):
            proc = llmgw(root, *verb)
            out = proc.stdout + proc.stderr
            assert "Traceback" not in out
            assert proc.exit_code == 1, f"llmgw {' '.join(verb)} accepted {other}/m.gguf: {out}"
            assert "models.yaml:2: models[0].source" in out and f"not on the site's endpoint {mirror}" in out, out
    assert seen == [], "validate or plan connected to a host the site does not configure"


def _fetch_play(tmp_path: Path, source: str, endpoint: str) -> Path:
    play = tmp_path / "fetch.yml"
    args = {"state": "present", "cache_dir": str(tmp_path / "cache"), "source": source,
            "hf_endpoint": endpoint, "hf_allow_http": True, "timeout": 5}
    play.write_text("- hosts: all\n  connection: local\n  gather_facts: false\n  tasks:\n    - name: Fetch\n"
                    f"      llmgw.cluster.weights: {json.dumps(args)}\n")
    return play


def test_the_host_refuses_a_source_on_another_host(tmp_path: Path) -> None:
    """The weights module as the role runs it, through Ansible: an older plan, a hand-made state or
    an llmgw that skipped the check above still cannot make a host ask another host."""
    env = ansible_env(ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"))
    with listener() as (other, seen), listener() as (mirror, asked):
        done = run_playbook(_fetch_play(tmp_path, f"{other}/m.gguf", mirror), env=env)
        assert done.returncode != 0, done.stdout[-2000:]
        assert "refusing to fetch" in done.stdout and "only from the site's endpoint" in done.stdout, done.stdout
        assert seen == [], "the host connected to a URL the catalog named on another host"
        assert not list((tmp_path / "cache").glob("*.part"))
        # The control: the same module fetching from the endpoint does ask it (a 404 here).
        done = run_playbook(_fetch_play(tmp_path, f"{mirror}/m.gguf", mirror), env=env)
        assert done.returncode != 0 and "404" in done.stdout, done.stdout[-2000:]
    assert any(b"/m.gguf" in s for s in asked), asked
