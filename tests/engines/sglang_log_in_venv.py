"""Run by tests/engines/test_sglang_log.py with the pinned SGLang's venv python.

argv[1]: the role's SGLang logging config; stdin: the command line's words after
`sglang.launch_server`, as JSON. SGLang's own code reads the options (its --config merger
included) and sets up logging (configure_logger), twice: first as SGLang does by default,
then with SGLANG_LOGGING_CONFIG_PATH as llmgw's units set it. After each: the line SGLang's
engine logs as it starts (sglang/srt/entrypoints/engine.py, logger `__name__`:
`server_args={_server_args_for_logging(server_args)}` at info, the test checks that source
line is there), and an info line of another SGLang logger, each after a marker on stderr.
Prints the api_key SGLang read, as JSON. (engine.py itself needs SGLang's GPU stack to
import, which the parser venv has not: its logger is named as it names it.)
"""

import json
import logging
import os
import sys

from sglang.srt.sampling.watermarking.core import redact_watermark_secrets
from sglang.srt.server_args import prepare_server_args
from sglang.srt.utils.common import configure_logger

args = prepare_server_args(json.loads(sys.stdin.read()))
engine_log = logging.getLogger("sglang.srt.entrypoints.engine")
for config in ("", sys.argv[1]):
    os.environ.pop("SGLANG_LOGGING_CONFIG_PATH", None)
    if config:
        os.environ["SGLANG_LOGGING_CONFIG_PATH"] = config
    configure_logger(args)
    print(f"=== {'llmgw' if config else 'default'}", file=sys.stderr, flush=True)
    engine_log.info(f"server_args={redact_watermark_secrets(args.resolved_dict())}")
    logging.getLogger("sglang.srt.managers.scheduler").info("scheduler says hello")
    for handler in logging.getLogger().handlers:
        handler.flush()
print(json.dumps({"api_key": args.api_key}))
