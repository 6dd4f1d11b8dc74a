"""Benchmarks: speed as ratios against the slow baseline in the same run, retrieval quality, scale."""

# Installed as lorarag.bench (pyproject's package-dir): a bare `import bench` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.bench":
    raise ImportError(f"import lorarag.bench, not {__name__}: the folder bench/ is installed as lorarag.bench")
