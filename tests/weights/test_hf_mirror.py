"""The test mirror itself: olah answers the Hub API offline and serves the tiny Llama byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest
from huggingface_hub import snapshot_download

from tests.support.hf_mirror import HfMirror

# Both tests in one xdist worker (`make unit` runs --dist loadgroup): each worker that runs one
# starts its own mirror (the fixture is per session, and each worker is a session).
pytestmark = pytest.mark.xdist_group("hf_mirror")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_mirror_resolves_main_to_the_repository_commit(hf_mirror: HfMirror) -> None:
    info = httpx.get(f"{hf_mirror.url}/api/models/{hf_mirror.repo}/revision/main").json()
    assert info["sha"] == hf_mirror.commit and len(info["sha"]) == 40
    assert {s["rfilename"] for s in info["siblings"]} == set(hf_mirror.file_names())


def test_snapshot_download_is_byte_identical(hf_mirror: HfMirror, tmp_path: Path) -> None:
    got = Path(snapshot_download(hf_mirror.repo, revision=hf_mirror.commit, local_dir=tmp_path / "dl",
                                 endpoint=hf_mirror.url, token=False))
    names = hf_mirror.file_names()
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(names)
    assert {n: _digest(got / n) for n in names} == {n: _digest(hf_mirror.files / n) for n in names}
