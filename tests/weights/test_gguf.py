"""GGUF headers: the real tiny model is servable, broken headers are refused with a reason."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from llmgw.weights.gguf import GgufError, file_fetcher, http_fetcher, read_header
from llmgw.weights.servable import EngineCaps, header_problems
from llmgw.weights.sources import inspect_source, read_sources, write_source
from tests.support.cli import run_cli
from tests.support.gguf_files import engine_caps_path, tiny_model, write_gguf


@pytest.fixture(scope="module")
def caps() -> EngineCaps:
    return EngineCaps.load(engine_caps_path())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("m") / "tiny.gguf")


@pytest.mark.engine  # the engine build's caps (scripts/build-engine)
def test_tiny_model_header(tiny: Path, caps: EngineCaps) -> None:
    header = read_header(file_fetcher(tiny), str(tiny))
    assert header.version == 3
    assert header.architecture == "llama"
    assert len(header.tensors) == 21
    assert {t.ggml_type for t in header.tensors} == {0}  # all F32
    assert header_problems(header, caps) == []


@pytest.mark.engine  # the engine build's caps (scripts/build-engine)
def test_unknown_architecture_is_refused(tmp_path: Path, caps: EngineCaps) -> None:
    path = write_gguf(tmp_path / "m.gguf", arch="notamodel")
    problems = header_problems(read_header(file_fetcher(path), str(path)), caps)
    assert problems == ["architecture 'notamodel' is unknown to this llama-server build; "
                        "upgrade the engine or use a vllm/sglang profile"]


@pytest.mark.engine  # the engine build's caps (scripts/build-engine)
def test_unsupported_tensor_type_is_refused(tmp_path: Path, caps: EngineCaps) -> None:
    path = write_gguf(tmp_path / "m.gguf", tensor_type_patch=31)  # Q4_0_4_4: removed from gguf files
    problems = header_problems(read_header(file_fetcher(path), str(path)), caps)
    assert len(problems) == 1
    assert problems[0].startswith("tensor type 31 (used by tok_embd.weight) is not supported")


@pytest.mark.engine  # the engine build's caps (scripts/build-engine)
def test_unsupported_version_is_refused(tmp_path: Path, caps: EngineCaps) -> None:
    path = write_gguf(tmp_path / "m.gguf", version_patch=4)
    problems = header_problems(read_header(file_fetcher(path), str(path)), caps)
    assert problems[0].startswith("GGUF version 4 is not supported by this llama-server build (it reads versions 2, 3)")


def test_not_gguf(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    with pytest.raises(GgufError, match="not a GGUF file"):
        read_header(file_fetcher(path), str(path))


@pytest.mark.parametrize("cut", [3, 10, 30, 200, 2000])
def test_truncated_header_names_the_byte(tiny: Path, tmp_path: Path, cut: int) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(tiny.read_bytes()[:cut])
    with pytest.raises(GgufError, match=r"truncated GGUF header at byte \d+: expected"):
        read_header(file_fetcher(path), str(path))


def test_corrupt_counts_are_refused(tiny: Path, tmp_path: Path) -> None:
    data = bytearray(tiny.read_bytes())
    data[16:24] = (2**62).to_bytes(8, "little")  # metadata count
    path = tmp_path / "bad.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(GgufError, match="implausible metadata count"):
        read_header(file_fetcher(path), str(path))


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files with Range support (or without, when the path starts with /norange/)."""

    requested: list[str] = []  # noqa: RUF012

    def do_GET(self) -> None:
        name = self.path.removeprefix("/norange")
        data = (Path(self.directory) / name.lstrip("/")).read_bytes()
        rng = self.headers.get("Range")
        type(self).requested.append(rng or "")
        if rng and not self.path.startswith("/norange/"):
            start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
            body = data[start:end + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_dir(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    handler = lambda *a, **k: _RangeHandler(*a, directory=str(tmp_path), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path
    server.shutdown()
    server.server_close()


@pytest.mark.engine  # the engine build's caps (scripts/build-engine)
def test_header_over_http_range_requests(http_dir: tuple[str, Path], tiny: Path, caps: EngineCaps) -> None:
    base, folder = http_dir
    (folder / "tiny.gguf").write_bytes(tiny.read_bytes())
    _RangeHandler.requested = []
    with httpx.Client() as client:
        header = read_header(http_fetcher(f"{base}/tiny.gguf", client), "tiny")
    assert header.architecture == "llama"
    assert header_problems(header, caps) == []
    assert all(r.startswith("bytes=") for r in _RangeHandler.requested)


def test_server_without_ranges_is_read_only_as_far_as_needed(http_dir: tuple[str, Path], tiny: Path) -> None:
    base, folder = http_dir
    (folder / "tiny.gguf").write_bytes(tiny.read_bytes())
    with httpx.Client() as client:
        header = read_header(http_fetcher(f"{base}/norange/tiny.gguf", client), "tiny")
    assert header.version == 3


def test_inspect_and_cache_sources(http_dir: tuple[str, Path], tiny: Path, tmp_path: Path) -> None:
    base, folder = http_dir
    (folder / "tiny.gguf").write_bytes(tiny.read_bytes())
    facts = tmp_path / "facts"
    with httpx.Client() as client:
        over_http = inspect_source(f"{base}/tiny.gguf", client)
        local = inspect_source(f"file://{tiny}", client)
        missing = inspect_source(f"{base}/nope.gguf", client)
    assert over_http.size_bytes == tiny.stat().st_size and over_http.format == "gguf"
    assert over_http.architecture == "llama"
    assert over_http.tensor_types == {0: ["token_embd.weight", "blk.0.attn_norm.weight", "blk.0.attn_q.weight"]}
    assert local.size_bytes == tiny.stat().st_size and local.gguf_version == 3
    assert missing.error is not None and missing.size_bytes is None
    for info in (over_http, local, missing):
        write_source(facts, info)
    cached = read_sources(facts)
    assert cached[f"file://{tiny}"] == local
    assert len(cached) == 3


@pytest.mark.engine  # the engine build's caps (scripts/build-engine)
def test_catalog_validate_refuses_an_unservable_gguf(site: Callable[..., Path], tmp_path: Path, tiny: Path) -> None:
    bad = write_gguf(tmp_path / "bad.gguf", arch="notamodel")
    root = site({"catalog/m.yaml": f"""
        models:
          - name: good
            source: file://{tiny}
            profiles: [{{name: cpu, engine: llamacpp}}]
          - name: bad
            source: file://{bad}
            profiles: [{{name: cpu, engine: llamacpp}}]
          - name: other
            source: file://{bad}x
            profiles: [{{name: gpu, engine: vllm, gpus: 1}}]
        """}, config=f"engine_artifacts: {engine_caps_path().parent}\n")
    r = run_cli("-C", str(root), "catalog", "validate")
    assert r.exit_code == 1
    assert "catalog/m.yaml:5: models[1].source: architecture 'notamodel' is unknown to this llama-server build" \
        in r.stderr
    assert "good" not in r.stderr  # the servable model and the vllm-only one raise nothing
    # recorded in the facts cache: the offline check gives the same answer without reading the files
    assert len(list((root / "facts" / "sources").glob("*.json"))) == 2
    bad.unlink()
    r = run_cli("-C", str(root), "catalog", "validate", "--offline")
    assert r.exit_code == 1 and "notamodel" in r.stderr


def test_offline_validate_says_once_which_sources_it_has_not_inspected(site: Callable[..., Path]) -> None:
    """Never inspected, 7 GGUF models and 7 whole repositories are two notes naming the first
    five of each, not fourteen lines (a 10,000-model catalog printed 10,000)."""
    models = "".join(f"""
          - name: m{i}
            source: file:///nowhere/m{i}.gguf
            profiles: [{{name: cpu, engine: llamacpp}}]
          - name: r{i}
            source: hf://org/repo{i}
            profiles: [{{name: gpu, engine: vllm, gpus: 1}}]""" for i in range(7))
    root = site({"catalog/m.yaml": "models:" + models + "\n"})
    r = run_cli("-C", str(root), "catalog", "validate", "--offline")
    assert r.exit_code == 0, r.stderr
    notes = [line for line in r.stderr.splitlines() if line.startswith("Note:")]
    assert "Note: m0, m1, m2, m3, m4 and 2 more: source not inspected yet; run `llmgw catalog validate` (online)" \
        in notes
    assert "Note: hf://org/repo0@main, hf://org/repo1@main, hf://org/repo2@main, hf://org/repo3@main, " \
        "hf://org/repo4@main and 2 more: not resolved to a commit yet; run `llmgw catalog validate` (online)" in notes
    assert len([n for n in notes if "not inspected yet" in n or "not resolved" in n]) == 2
