"""Weights: cache names, what a source is (size, GGUF header), and whether llama.cpp can serve it."""
