# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""What every host reader shares: paths under a fake root, reading a file, running a command.

Pure Python, no Ansible import. Every reader takes `root` (where /proc and /sys live,
"/" on a host) and the few system calls it makes (stat, statvfs, running a command)
as arguments, so unit tests drive it against fake trees.

**Unknown is not zero**: a value that cannot be read is None, never 0.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any, Callable, Dict, List, Optional, Tuple

Run = Callable[[List[str]], Tuple[int, str, str]]  # argv -> (rc, stdout, stderr)
FactDict = Dict[str, Any]


def host_path(root: str, rel: str) -> str:
    """`rel` (an absolute path on the host) under `root`, where the host's / is."""
    return os.path.join(root, rel.lstrip("/"))


def read_text(path: str) -> Optional[str]:
    """A file's text, or None when it cannot be read (unknown, not empty)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def run_command(argv: List[str], timeout: float = 20.0) -> Tuple[int, str, str]:
    """Run a command without a shell; a missing program is rc 127, a hang rc 124."""
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, check=False, text=True)
    except FileNotFoundError:
        return 127, "", "%s: not found" % argv[0]
    except subprocess.TimeoutExpired:
        return 124, "", "%s: timed out after %ds" % (argv[0], timeout)
    except OSError as exc:
        return 126, "", "%s: %s" % (argv[0], exc)
    return proc.returncode, proc.stdout, proc.stderr
