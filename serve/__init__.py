"""Serving a trained system: an OpenAI-compatible HTTP API with dynamic batching (serve/app.py)."""

# Installed as lorarag.serve (pyproject's package-dir): a bare `import serve` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.serve":
    raise ImportError(f"import lorarag.serve, not {__name__}: the folder serve/ is installed as lorarag.serve")
