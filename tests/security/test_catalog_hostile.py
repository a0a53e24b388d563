"""Hostile catalogs, as a pull request could bring them, through the real CLI
(`llmgw catalog validate`, `llmgw plan`): each is refused with `Error:` and the file:line of
the offending key, exit 1, no traceback, nothing run.

The resource bombs and the inventory script go through a child process, as an operator's
shell runs them, in bounded time (the generous subprocess timeout, not a timed assert): a
hang or a blow-up there cannot take the test run with it. The rest run the same entry point
in-process (tests.support.cli.run_cli, in the site's folder as the child was): what they
check is our code's refusal, and a child costs a second of interpreter start-up each.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import Result, run_cli

LLMGW = Path(sys.executable).parent / "llmgw"
TIMEOUT_S = 300  # far above the few seconds each takes; only a hang or a blow-up reaches it

INVENTORY = """\
all:
  children:
    llmgw_nodes:
      hosts:
        node-1: {ansible_host: 127.0.0.1}
"""


def make_site(tmp: Path, catalog: str | bytes, *, config: str = "", inventory: str = INVENTORY) -> Path:
    root = tmp / "site"
    (root / "catalog").mkdir(parents=True)
    (root / "inventory").mkdir()
    (root / "llmgw.yaml").write_text(config)
    (root / "inventory" / "hosts.yml").write_text(inventory)
    path = root / "catalog" / "models.yaml"
    if isinstance(catalog, bytes):
        path.write_bytes(catalog)
    else:
        path.write_text(textwrap.dedent(catalog).lstrip("\n"))
    return root


def llmgw(root: Path, *args: str, child: bool = False) -> Result:
    """`llmgw -C root ARGS` run in `root`: in a child process when `child`, else in-process."""
    if child:
        proc = subprocess.run([str(LLMGW), "-C", str(root), *args], capture_output=True, text=True,
                              errors="replace", timeout=TIMEOUT_S, cwd=root, check=False)
        return Result(proc.returncode, proc.stdout, proc.stderr)
    here = Path.cwd()
    os.chdir(root)  # where a payload that ran would write PWNED, as in the child
    try:
        return run_cli("-C", str(root), *args)
    finally:
        os.chdir(here)


def refused(proc: Result, where: str) -> str:
    """Assert the one shape every refusal has; return stderr."""
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert proc.exit_code == 1, out
    assert proc.stderr.startswith("Error:"), out
    assert re.search(where, out), f"expected {where!r} in:\n{out}"
    return proc.stderr


def model(**profile: str) -> str:
    extra = "".join(f"\n            {k}: {v}" for k, v in profile.items())
    return f"""
    models:
      - name: m
        source: hf://org/repo/m.gguf
        profiles:
          - name: p
            engine: llamacpp{extra}
    """


ATTACK = "{{ lookup('pipe', 'touch PWNED') }}"

CASES = {
    "jinja in args": (model(args=f'["--x", "{ATTACK}"]'), r"models\.yaml:7: models\[0\]\.profiles\[0\]\.args\[1\]: "
                                                         r"contains template syntax '\{\{'"),
    "jinja statement in env": (model(env='{A: "{% if 1 %}x{% endif %}"}'), r"models\.yaml:7: .*env\.A: .*'\{%'"),
    "jinja comment in a label": (model(node_selector='{tier: "{# x #}"}'), r"models\.yaml:7: .*node_selector"),
    "jinja in source": ("""
        models:
          - name: m
            source: "https://h/{{ lookup('pipe', 'touch PWNED') }}"
            profiles: [{name: p, engine: llamacpp}]
        """, r"models\.yaml:3: models\[0\]\.source: contains template syntax"),
    "NUL in env": (model(env='{A: "x\\0ExecStartPre=/bin/id"}'), r"models\.yaml:7: .*env\.A: .*control character"),
    "escape in args": (model(args='["a\\eb"]'), r"models\.yaml:7: .*args\[0\]: .*control character"),
    "newline in env": (model(env='{A: "x\\nExecStartPre=/bin/id"}'), r"models\.yaml:7: .*control character"),
    "env name that is not one": (model(env='{"A B": x}'), r"models\.yaml:7: models\[0\]\.profiles\[0\]\.env"),
    "boolean gpus": (model(gpus="true"), r"models\.yaml:7: models\[0\]\.profiles\[0\]\.gpus: true is a boolean"),
    "boolean scaling": ("""
        models:
          - name: m
            source: hf://org/repo/m.gguf
            scaling: {min: true}
            profiles: [{name: p, engine: llamacpp}]
        """, r"models\.yaml:4: models\[0\]\.scaling\.min: true is a boolean"),
    "broken IPv6 URL": ("""
        models:
          - name: m
            source: "https://[::1/x"
            profiles: [{name: p, engine: llamacpp}]
        """, r"models\.yaml:3: models\[0\]\.source: .*not a valid URL"),
    "python object tag": ("""
        models:
          - name: m
            source: hf://org/repo/m.gguf
            profiles: !!python/object/apply:os.system ["touch PWNED"]
        """, r"models\.yaml:4: not valid YAML: the tag .*python/object/apply:os.system is not allowed"),
    "custom tag": ("""
        models:
          - name: !vault m
            source: hf://org/repo/m.gguf
            profiles: [{name: p, engine: llamacpp}]
        """, r"models\.yaml:2: not valid YAML: a tag"),
    "billion laughs": ("models:\n  - &a [x, x, x, x, x, x, x, x, x, x]\n"
                       + "".join(f"  - &{c} [{', '.join([f'*{p}'] * 10)}]\n"
                                 for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
                       r"models\.yaml:\d+: not valid YAML: expands to more than 1,000,000 values"),
    "20,000-deep flow nesting": ("models: " + "[" * 20_000 + "]" * 20_000 + "\n",
                                 r"models\.yaml:1: not valid YAML: nests deeper than 64 levels"),
    "2,000-deep block nesting": ("models:\n" + "".join(" " * i + "- \n" for i in range(1, 2000)),
                                 r"models\.yaml:\d+: not valid YAML: nests deeper than 64 levels"),
    "not UTF-8": (b"models:\n  - name: m\xff\xfe\n", r"models\.yaml:2: is not UTF-8 text: byte 0xff"),
    "a NUL byte in the file": (b"models:\n  - name: \x00\n", r"models\.yaml:2: not valid YAML: unacceptable character"),
}


# plan loads the catalog as validate does (one loader); it runs on a few, to show it refuses too
PLAN_CASES = ["jinja in args", "python object tag", "billion laughs", "20,000-deep flow nesting", "not UTF-8"]
# In a child process (see the module's docstring): the bombs, and a payload that would run a command.
CHILD_CASES = {"billion laughs", "20,000-deep flow nesting", "python object tag"}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_catalog_is_refused_at_its_line(tmp_path: Path, case: str) -> None:
    text, where = CASES[case]
    root = make_site(tmp_path, text)
    child = case in CHILD_CASES
    refused(llmgw(root, "catalog", "validate", "--offline", child=child), where)
    if case in PLAN_CASES:
        refused(llmgw(root, "plan", child=child), where)
    assert not list(root.rglob("PWNED")) and not (tmp_path / "PWNED").exists()


def test_a_100_mb_catalog_is_refused_unread(tmp_path: Path) -> None:
    root = make_site(tmp_path, "")
    with (root / "catalog" / "models.yaml").open("wb") as fh:
        fh.truncate(100 * 1024 * 1024)  # sparse: 100 MB of NUL bytes
    refused(llmgw(root, "catalog", "validate", "--offline", child=True), r"models\.yaml: is larger than 8 MiB")


def test_a_clashing_alias_and_a_missing_fallback_point_at_their_own_lines(tmp_path: Path) -> None:
    root = make_site(tmp_path, """
        models:
          - name: a
            source: hf://org/repo/a.gguf
            profiles: [{name: p, engine: llamacpp}]
          - name: b
            source: hf://org/repo/b.gguf
            aliases:
              - x
              - a
            fallbacks: [nowhere]
            profiles: [{name: p, engine: llamacpp}]
        """)
    err = refused(llmgw(root, "catalog", "validate", "--offline"), r"models\.yaml:9: models\[1\]\.aliases\[1\]: "
                                                                      r"'a' is already used by model 'a' at "
                                                                      r"catalog/models\.yaml:2")
    assert "models.yaml:10: models[1].fallbacks[0]: 'nowhere'" in err


@pytest.mark.parametrize(("config", "where"), [
    (b"catalog: c\xff\n", r"llmgw\.yaml:1: is not UTF-8 text"),
    (b"ports: {start: true}\n", r"llmgw\.yaml:1: ports\.start"),
    (b"catalog: !!python/object:os.system {}\n", r"llmgw\.yaml:1: the tag"),
    (b"recorded: [" * 100 + b"\n", r"llmgw\.yaml:1: nests deeper than 64 levels"),
])
def test_hostile_site_file_is_refused(tmp_path: Path, config: bytes, where: str) -> None:
    root = make_site(tmp_path, model())
    (root / "llmgw.yaml").write_bytes(config)
    refused(llmgw(root, "catalog", "validate", "--offline"), where)


def test_a_host_name_with_a_space_is_refused_at_its_line(tmp_path: Path) -> None:
    inventory = INVENTORY.replace("node-1:", "node-1: {}\n        \"bad host\":")
    root = make_site(tmp_path, model(), inventory=inventory)
    refused(llmgw(root, "plan"), r"hosts\.yml:6: host name 'bad host' is not a DNS name")


def test_plan_runs_no_inventory_script(tmp_path: Path) -> None:
    """An executable file in the inventory folder is an Ansible inventory script: `plan`
    on a pull request must not run it (nor read an ansible.cfg the pull request adds)."""
    root = make_site(tmp_path, model())
    marker = tmp_path / "PWNED-inventory"
    script = root / "inventory" / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho '{{\"_meta\": {{\"hostvars\": {{}}}}}}'\n")
    script.chmod(0o755)
    (root / "ansible.cfg").write_text(f"[inventory]\nenable_plugins = script, yaml\n[defaults]\n"
                                      f"vault_password_file = {script}\n")
    proc = llmgw(root, "plan", child=True)
    assert not marker.exists(), proc.stdout + proc.stderr
    refused(proc, r"could not parse the inventory")


@pytest.mark.parametrize(("name", "data"), [("node-1.json", b'{"host": "node-1", \xff}'),
                                            ("node-1.json", b"[" * 20_000 + b"]" * 20_000)])
def test_hostile_facts_file_is_refused(tmp_path: Path, name: str, data: bytes) -> None:
    root = make_site(tmp_path, model())
    (root / "facts").mkdir()
    (root / "facts" / name).write_bytes(data)
    refused(llmgw(root, "plan"), r"facts file .*node-1\.json")


def test_a_state_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    root = make_site(tmp_path, model())
    (root / "state.json").write_bytes(b'{"serial": 1,\n "lineage": "\xff"}\n')
    refused(llmgw(root, "plan"), r"state\.json:2: is not UTF-8 text")


def test_a_facts_file_cannot_smuggle_a_unit_line_through_an_adapter_name(tmp_path: Path) -> None:
    """HCA names reach engine units (NCCL_IB_HCA=...); facts are committed, so a pull request could edit them."""
    root = make_site(tmp_path, model())
    (root / "facts").mkdir()
    (root / "facts" / "node-1.json").write_text(
        '{\n  "version": 1,\n  "host": "node-1",\n  "gathered_at": "2026-11-30T05:40:00Z",\n'
        '  "ib_adapters": [{"name": "mlx5_0\\nExecStartPre=/bin/id"}]\n}\n')
    refused(llmgw(root, "plan"), r"facts file .*node-1\.json:5: InfiniBand adapter name")


def test_a_catalog_link_out_of_the_catalog_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text("models:\n  - name: SECRET-CONTENT\n")
    root = make_site(tmp_path, model())
    (root / "catalog" / "leak.yaml").symlink_to(secret)
    err = refused(llmgw(root, "catalog", "validate", "--offline"), r"catalog/leak\.yaml: is a link to a file outside")
    assert "SECRET-CONTENT" not in err


def test_an_inventory_yaml_bomb_is_refused_before_ansible_expands_it(tmp_path: Path) -> None:
    """ansible-inventory --list would write every alias out (gigabytes, minutes): refused first."""
    bomb = "all:\n  vars:\n    a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"    {c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    root = make_site(tmp_path, model(), inventory=bomb + "  hosts:\n    node-1: {}\n")
    refused(llmgw(root, "plan", child=True), r"hosts\.yml:\d+: expands to more than 1,000,000 values")
