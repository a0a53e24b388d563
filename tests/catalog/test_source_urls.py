"""The source check's quick path for plain hf:// sources refuses what urlsplit refuses."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmgw.catalog import Model


def _model(source: str) -> Model:
    return Model.model_validate({"name": "m", "source": source, "profiles": [{"name": "p", "engine": "llamacpp"}]})


@pytest.mark.parametrize("source", ["hf://org/repo/model.gguf", "hf://org/repo", "hf://org/repo@abc123",
                                    "hf://org.x_y-z/repo/sub/dir/file.gguf"])
def test_plain_hf_sources_pass(source: str) -> None:
    assert _model(source).source == source


@pytest.mark.parametrize(("source", "expected"), [
    ("hf://org:99999/repo/f.gguf", "is not a valid URL"),  # a port out of range, found by parsing it
    ("hf://org:x/repo/f.gguf", "is not a valid URL"),
    ("hf://[::1/repo/f.gguf", "is not a valid URL"),  # an unclosed IPv6 bracket
    ("hf://org:0/repo/f.gguf", "port 0 is not a port"),
    ("hf://org\uff03x/repo/f.gguf", "is not a valid URL"),  # a character NFKC turns into '#'
])
def test_hf_sources_urlsplit_refuses_are_refused(source: str, expected: str) -> None:
    with pytest.raises(ValidationError, match=expected):
        _model(source)
