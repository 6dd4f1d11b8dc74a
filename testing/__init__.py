"""Helpers that test and measure the stack rather than being part of it, shipped in the wheel so
`lorarag bench ...` and a `prepare_base: tiny_qwen3` run work from an installed package.

- `tiny`: random-weight tiny Qwen3 models (LM, embedder, reranker) and their tokenizer, built
  locally in seconds: they exercise the code paths of every backend, never answer quality.
- `servers`: real local model servers (vLLM, `swift deploy`) started on 127.0.0.1 and stopped
  by process group.

Layer (pyproject's import-linter contract): beside train and eval, so the study, serve, bench and
the CLI may use it and nothing below them does; it imports nothing of lorarag.
"""

# Installed as lorarag.testing (pyproject's package-dir): a bare `import testing` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.testing":
    raise ImportError(f"import lorarag.testing, not {__name__}: the folder testing/ is installed as lorarag.testing")
