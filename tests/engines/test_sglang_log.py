"""SGLang's API key stays out of its log (#13).

SGLang 0.5.23 logs every server argument at info as it starts, the API key among them.
llmgw's units point SGLANG_LOGGING_CONFIG_PATH at the role's logging config, which keeps
that one logger to warnings. Checked with the pinned SGLang's own code in its cached venv:
the key file the role writes reaches SGLang's api_key through SGLang's --config merger, the
`server_args=` line carries the key under SGLang's default logging (so this test can fail)
and not under the role's config, while SGLang's other info lines still show.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from llmgw.engines import Shard, command, versions
from tests.engines.shapes import LAYOUT

HERE = Path(__file__).resolve().parent
ROLE = HERE.parents[1] / "roles" / "llmgw_engine"
CACHE = Path(os.environ.get("LLMGW_CACHE") or Path.home() / ".cache" / "llmgw")
SITE_PACKAGES = CACHE / "engine-venvs" / f"sglang-{versions.SGLANG}" / "lib" / "python3.11" / "site-packages"
KEY = "sk-llmgw-0123456789abcdef-must-not-be-logged"

pytestmark = pytest.mark.slow


def key_file_text(unit: str) -> str:
    """The SGLang key file as the role's keys.yml writes it (its own `content:` template)."""
    tasks = yaml.safe_load((ROLE / "tasks" / "keys.yml").read_text())
    [task] = [t for t in tasks if "(SGLang)" in t["name"]]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["to_json"] = json.dumps
    return env.from_string(task["ansible.builtin.copy"]["content"]).render(
        llmgw_engine_api_keys={unit: KEY}, item={"unit": unit, "engine": "sglang"})


def test_the_engine_logs_its_arguments_where_the_config_points() -> None:
    """The line the config silences is where this version writes it (a move fails here)."""
    engine = SITE_PACKAGES / "sglang" / "srt" / "entrypoints" / "engine.py"
    if not engine.is_file():
        pytest.fail(f"{engine} is missing: run scripts/build-engine-venvs (scripts/setup-host does)")
    source = engine.read_text()
    assert "logger = logging.getLogger(__name__)" in source
    assert 'logger.info(f"server_args={_server_args_for_logging(server_args)}")' in source
    config = json.loads((ROLE / "files" / "sglang-logging.json").read_text())
    assert config["loggers"] == {"sglang.srt.entrypoints.engine": {"level": "WARNING"}}


def test_the_key_reaches_sglang_but_not_its_log(tmp_path: Path) -> None:
    key_file = tmp_path / "llmgw-sg-1-0.yaml"
    key_file.write_text(key_file_text("llmgw-sg-1-0"))
    shard = Shard(engine="sglang", model="sg", model_path=str(tmp_path), port=8001, key_config=str(key_file))
    words = command(shard, LAYOUT)
    python = SITE_PACKAGES.parents[2] / "bin" / "python"
    config = ROLE / "files" / "sglang-logging.json"
    done = subprocess.run([str(python), str(HERE / "sglang_log_in_venv.py"), str(config)],
                          input=json.dumps(words[words.index("sglang.launch_server") + 1:]), capture_output=True,
                          text=True, check=False, timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"api_key": KEY}
    default, _, ours = done.stderr.partition("=== llmgw")
    default = default.partition("=== default")[2]
    assert KEY in default and "scheduler says hello" in default, done.stderr[-3000:]
    assert KEY not in ours and "scheduler says hello" in ours, done.stderr[-3000:]
