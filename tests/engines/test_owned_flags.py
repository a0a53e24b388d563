"""llmgw.engines.flags, proved against the engines' own parsers: the lists cannot miss a
spelling.

vLLM and SGLang: the pinned parser (in its cached virtualenv, tests/engines/owned_in_venv.py)
says which option each word names. For every refused option, every option string of its
destination is listed (aliases, `--no-` negations), and every spelling the parser reads as
it (exact, `=value`, `_` for `-`, `.key`, every unique prefix) is refused by our check;
no option of any other destination is refused (the check does not turn tuning away).
llama.cpp: the built llama-server's `--help` names every alias of an option on one line:
each alias of a refused option is listed, and the lists name only options it has.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from llmgw.engines import get
from llmgw.engines.flags import check_args, owned_flag
from tests.engines.test_parsers import ENGINE_DIR, HERE, VENVS

# The pinned parsers' venvs and the built llama-server (scripts/setup-host); a minute each.
pytestmark = [pytest.mark.engine, pytest.mark.slow]


def spellings(option: str) -> list[str]:
    """Every way of writing `option` an argparse-based engine might read as it."""
    out = [option, f"{option}=1"]
    if option.startswith("--"):
        out += ["--" + option[2:].replace("-", "_"), f"{option}.key"]
        out += [option[:k] for k in range(3, len(option))]
    else:
        out += [f"{option}1", f"{option}.key"]
        out += [option[:k] for k in range(2, len(option))]
    return out


def ask_parser(engine: str, words: list[str]) -> tuple[dict[str, str], dict[str, str | None]]:
    python = VENVS[engine] / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run scripts/build-engine-venvs (scripts/setup-host does)")
    done = subprocess.run([str(python), str(HERE / "owned_in_venv.py"), engine], input=json.dumps(words),
                          capture_output=True, text=True, check=False, timeout=600,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    return answer["options"], dict(zip(words, answer["dests"], strict=True))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_spelling_the_parser_reads_as_a_refused_option_is_refused(engine: str) -> None:
    table = get(engine).flags
    options, _ = ask_parser(engine, [])
    assert sorted(set(table) - set(options)) == [], "listed options the pinned parser does not have"
    refused_dests = {options[o] for o in table}
    every_alias = {o for o, d in options.items() if d in refused_dests}
    assert sorted(every_alias - set(table)) == [], "spellings of a refused option that are not listed"

    words = sorted({w for o in every_alias for w in spellings(o)})
    _, dests = ask_parser(engine, words)
    read_as_refused = [w for w, d in dests.items() if d in refused_dests]
    missed = [w for w in read_as_refused if owned_flag(engine, w) is None]
    assert missed == []
    # The proof covers what it claims: the parser really reads prefixes (allow_abbrev) and,
    # for vLLM, underscores, as the option.
    assert "--trust-rem" in read_as_refused and "--host=1" in read_as_refused
    if engine == "vllm":
        assert "--api_key" in read_as_refused and "-tp" in read_as_refused
    else:
        assert "--dist-init" in read_as_refused


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_no_option_of_another_destination_is_refused(engine: str) -> None:
    options, _ = ask_parser(engine, [])
    refused = get(engine).flags
    refused_dests = {options[o] for o in refused}
    others = {o for o, d in options.items() if d not in refused_dests}
    wrongly = sorted(o for o in others if owned_flag(engine, o) is not None)
    assert wrongly == []
    # tuning_prefixes holds only real options of other destinations, each a prefix of a refused one
    assert {o for o in get(engine).tuning_prefixes if o not in others or not any(r.startswith(o) for r in refused)} \
        == set()
    assert "--max-model-len" in options or "--context-length" in options  # the check can pass


def help_groups(binary: Path) -> list[set[str]]:
    """The option strings llama-server's --help lists, one set per option (its aliases)."""
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run scripts/build-engine (scripts/setup-host does)")
    done = subprocess.run([str(binary), "--help"], capture_output=True, text=True, check=False, timeout=60)
    groups = []
    for line in (done.stdout + done.stderr).splitlines():
        names = []
        for token in line.split():  # `-hf,   -hfr, --hf-repo <user>/<model>`: the aliases, then the value
            name = token.rstrip(",")
            if not re.fullmatch(r"-{1,2}[A-Za-z][\w.-]*", name):
                break
            names.append(name)
            if not token.endswith(","):
                break
        if names:
            groups.append(set(names))
    return groups


def test_llamacpp_lists_every_alias_of_a_refused_option() -> None:
    groups = help_groups(ENGINE_DIR / "llama-server")
    known = set().union(*groups)
    table = get("llamacpp").flags
    assert sorted(set(table) - known) == [], "listed options llama-server does not have"
    missing = sorted(o for g in groups if g & set(table) for o in g - set(table))
    assert missing == []
    assert {"-m", "--model"} <= next(g for g in groups if "--model" in g)  # the help is parsed as meant


def test_llamacpp_reads_no_prefix_and_no_equals() -> None:
    """llama.cpp matches whole words: `--hos` and `--host=x` are not `--host` there, so
    refusing exact words is enough (the server refuses to start on an unknown word)."""
    server = ENGINE_DIR / "llama-server"
    if not server.exists():
        pytest.fail(f"{server} is missing: run scripts/build-engine (scripts/setup-host does)")
    for word in ("--hos", "--host=0.0.0.0"):
        done = subprocess.run([str(server), word, "--version"], capture_output=True, text=True, check=False,
                              timeout=60)
        assert done.returncode != 0 and "invalid argument" in (done.stdout + done.stderr), word
    assert check_args("llamacpp", ["--ctx-size", "2048"]) == []
