#!/usr/bin/env python3
"""A real local Hugging Face mirror for the tests, the lab and the demo: olah serving git folders offline.

usage:
  hf_mirror.py prepare                       write the tiny model repository (skips when present)
  hf_mirror.py serve --host H --port P       prepare, then run olah in the foreground
  hf_mirror.py serve --lab NAME --port P     the same, bound to lab NAME's podman gateway address
                                             (what its hosts reach; put `mirror: http://GW:P` in llmgw.yaml)

`prepare` writes $LLMGW_CACHE/hf-mirror/mirrors/models/llmgw/tiny-llama: the tiny Llama
of make_tiny_hf_llama.py committed to a git repository with a fixed author and date, so
its commit (the revision llmgw pins) is the same on every machine.

`serve` runs `olah-cli` (PyPI olah, in the virtualenv's dev extras) offline: it answers
the Hub API and file downloads for the repositories under `mirrors/`, never contacting
huggingface.co. One trap: offline, olah answers the model API only with a revision
(`/api/models/ORG/REPO/revision/REV`, which gives the commit `sha`); `/api/models/ORG/REPO`
is a 401, so clients resolve the revision first (llmgw does). Bind it no wider than its
clients need: 127.0.0.1 for tests, the lab network's gateway address for lab hosts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = "llmgw/tiny-llama"
# Fixed identity and date: the same files give the same commit everywhere.
GIT_ENV = {"GIT_AUTHOR_NAME": "llmgw", "GIT_AUTHOR_EMAIL": "llmgw@localhost", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_NAME": "llmgw", "GIT_COMMITTER_EMAIL": "llmgw@localhost",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def root() -> Path:
    return Path(os.environ.get("LLMGW_CACHE") or Path.home() / ".cache" / "llmgw") / "hf-mirror"


def repo_dir(base: Path | None = None) -> Path:
    return (base or root()) / "mirrors" / "models" / REPO


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


def prepare(base: Path | None = None) -> Path:
    """The tiny model's git repository, written when missing (atomically: a half-made one is never used)."""
    final = repo_dir(base)
    if (final / ".git").is_dir() and (final / "model.safetensors").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-llama-", dir=final.parent))
    subprocess.run([sys.executable, str(HERE / "make_tiny_hf_llama.py"), str(tmp)], check=True,
                   stdout=subprocess.DEVNULL)
    (tmp / "README.md").write_text("# tiny-llama\n\nA random 2-layer Llama for llmgw's tests. Its text is nonsense.\n")
    _git(tmp, "init", "-q", "-b", "main")
    _git(tmp, "add", "-A")
    _git(tmp, "commit", "-q", "-m", "tiny-llama")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def commit(base: Path | None = None) -> str:
    """The commit `main` of the tiny model's repository names."""
    return _git(repo_dir(base), "rev-parse", "HEAD")


def config(base: Path, host: str, port: int, run_dir: Path) -> str:
    netloc = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    return "\n".join([
        "[basic]", f'host = "{host}"', f"port = {port}", f'repos-path = "{run_dir / "repos"}"',
        'mirror-scheme = "http"', f'mirror-netloc = "{netloc}"', f'mirror-lfs-netloc = "{netloc}"',
        f'mirrors-path = ["{base / "mirrors"}"]', "", "[accessibility]", "offline = true", ""])


def podman_gateway(network: str) -> str:
    """The host's own IPv4 address on a podman network (a lab's network is named after the lab)."""
    out = subprocess.run(["podman", "network", "inspect", network], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"hf_mirror: no podman network {network!r} (is the lab up?): {out.stderr.strip()}")
    for subnet in json.loads(out.stdout)[0].get("subnets") or []:
        gateway = subnet.get("gateway") or ""
        if gateway and ":" not in gateway:
            return str(gateway)
    raise SystemExit(f"hf_mirror: podman network {network!r} has no IPv4 gateway")


def olah_cli() -> str:
    beside = Path(sys.executable).parent / "olah-cli"
    found = str(beside) if beside.is_file() else shutil.which("olah-cli")
    if not found:
        raise SystemExit("hf_mirror: olah-cli not found; install the dev extras (pip install -e '.[dev]')")
    return found


def serve(host: str, port: int, run_dir: Path, base: Path | None = None) -> None:
    base = base or root()
    prepare(base)
    run_dir.mkdir(parents=True, exist_ok=True)
    conf = run_dir / "olah.toml"
    conf.write_text(config(base, host, port, run_dir))
    # olah writes its logs to the working folder; keep them with the run.
    os.chdir(run_dir)
    os.execv(olah_cli(), [olah_cli(), "-c", str(conf)])


def main() -> None:
    ap = argparse.ArgumentParser(description="A local Hugging Face mirror (olah) serving llmgw's tiny model.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare")
    s = sub.add_parser("serve")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--host", default="127.0.0.1")
    where.add_argument("--lab", help="bind to this lab's podman network gateway")
    s.add_argument("--port", type=int, default=18090)
    s.add_argument("--run-dir", type=Path, help="olah's own cache and logs (default: a folder under the cache)")
    args = ap.parse_args()
    if args.cmd == "prepare":
        print(prepare(), commit())
        return
    host = podman_gateway(args.lab) if args.lab else args.host
    serve(host, args.port, args.run_dir or root() / "run" / f"{host}-{args.port}")


if __name__ == "__main__":
    main()
