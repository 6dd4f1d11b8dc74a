"""The study layer: world or knowledge base -> index -> train -> calibrate -> evaluate -> report."""

# Installed as lorarag.study (pyproject's package-dir): a bare `import study` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.study":
    raise ImportError(f"import lorarag.study, not {__name__}: the folder study/ is installed as lorarag.study")
